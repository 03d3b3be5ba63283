package externalgrpc

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/gpuscaler/gpuscaler/proto"
)

// fuzzMethod is one of cluster-autoscaler's calls, with a seed request.
type fuzzMethod struct {
	name      string
	req, resp func() proto.Message
	seed      proto.Message
}

// fuzzMethods are every call of the CloudProvider service.
var fuzzMethods = []fuzzMethod{
	{pb.CloudProvider_NodeGroups_FullMethodName, func() proto.Message { return &pb.NodeGroupsRequest{} },
		func() proto.Message { return &pb.NodeGroupsResponse{} }, &pb.NodeGroupsRequest{}},
	{pb.CloudProvider_NodeGroupForNode_FullMethodName, func() proto.Message { return &pb.NodeGroupForNodeRequest{} },
		func() proto.Message { return &pb.NodeGroupForNodeResponse{} },
		&pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: "sim://contract-h100-abcde", Name: "n"}}},
	{pb.CloudProvider_PricingNodePrice_FullMethodName, func() proto.Message { return &pb.PricingNodePriceRequest{} },
		func() proto.Message { return &pb.PricingNodePriceResponse{} },
		&pb.PricingNodePriceRequest{Node: &pb.ExternalGrpcNode{ProviderID: "sim://x", Labels: map[string]string{"a": "b"}}}},
	{pb.CloudProvider_PricingPodPrice_FullMethodName, func() proto.Message { return &pb.PricingPodPriceRequest{} },
		func() proto.Message { return &pb.PricingPodPriceResponse{} }, &pb.PricingPodPriceRequest{}},
	{pb.CloudProvider_GPULabel_FullMethodName, func() proto.Message { return &pb.GPULabelRequest{} },
		func() proto.Message { return &pb.GPULabelResponse{} }, &pb.GPULabelRequest{}},
	{pb.CloudProvider_GetAvailableGPUTypes_FullMethodName, func() proto.Message { return &pb.GetAvailableGPUTypesRequest{} },
		func() proto.Message { return &pb.GetAvailableGPUTypesResponse{} }, &pb.GetAvailableGPUTypesRequest{}},
	{pb.CloudProvider_Cleanup_FullMethodName, func() proto.Message { return &pb.CleanupRequest{} },
		func() proto.Message { return &pb.CleanupResponse{} }, &pb.CleanupRequest{}},
	{pb.CloudProvider_Refresh_FullMethodName, func() proto.Message { return &pb.RefreshRequest{} },
		func() proto.Message { return &pb.RefreshResponse{} }, &pb.RefreshRequest{}},
	{pb.CloudProvider_NodeGroupTargetSize_FullMethodName, func() proto.Message { return &pb.NodeGroupTargetSizeRequest{} },
		func() proto.Message { return &pb.NodeGroupTargetSizeResponse{} }, &pb.NodeGroupTargetSizeRequest{Id: "h100"}},
	{pb.CloudProvider_NodeGroupIncreaseSize_FullMethodName, func() proto.Message { return &pb.NodeGroupIncreaseSizeRequest{} },
		func() proto.Message { return &pb.NodeGroupIncreaseSizeResponse{} }, &pb.NodeGroupIncreaseSizeRequest{Id: "h100", Delta: 1}},
	{pb.CloudProvider_NodeGroupDeleteNodes_FullMethodName, func() proto.Message { return &pb.NodeGroupDeleteNodesRequest{} },
		func() proto.Message { return &pb.NodeGroupDeleteNodesResponse{} },
		&pb.NodeGroupDeleteNodesRequest{Id: "h100", Nodes: []*pb.ExternalGrpcNode{{ProviderID: "sim://nope"}}}},
	{pb.CloudProvider_NodeGroupDecreaseTargetSize_FullMethodName, func() proto.Message { return &pb.NodeGroupDecreaseTargetSizeRequest{} },
		func() proto.Message { return &pb.NodeGroupDecreaseTargetSizeResponse{} }, &pb.NodeGroupDecreaseTargetSizeRequest{Id: "h100", Delta: -1}},
	{pb.CloudProvider_NodeGroupNodes_FullMethodName, func() proto.Message { return &pb.NodeGroupNodesRequest{} },
		func() proto.Message { return &pb.NodeGroupNodesResponse{} }, &pb.NodeGroupNodesRequest{Id: "mig"}},
	{pb.CloudProvider_NodeGroupTemplateNodeInfo_FullMethodName, func() proto.Message { return &pb.NodeGroupTemplateNodeInfoRequest{} },
		func() proto.Message { return &pb.NodeGroupTemplateNodeInfoResponse{} }, &pb.NodeGroupTemplateNodeInfoRequest{Id: "mig"}},
	{pb.CloudProvider_NodeGroupGetOptions_FullMethodName, func() proto.Message { return &pb.NodeGroupAutoscalingOptionsRequest{} },
		func() proto.Message { return &pb.NodeGroupAutoscalingOptionsResponse{} },
		&pb.NodeGroupAutoscalingOptionsRequest{Id: "mig", Defaults: &pb.NodeGroupAutoscalingOptions{ScaleDownUtilizationThreshold: 0.5}}},
}

// FuzzService sends cluster-autoscaler's calls with arbitrary contents
// (any field, any size, any group, any provider ID) to the provider on the
// simulated cloud, over gRPC. None may crash it, and every error is a gRPC
// status with a code cluster-autoscaler can act on, never Unknown.
func FuzzService(f *testing.F) {
	fx := newFixture(f, contractConfig, "sim")
	for i, m := range fuzzMethods {
		data, err := proto.Marshal(m.seed)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), data)
	}
	f.Add(uint8(9), []byte{0x10, 0x80, 0x80, 0x80, 0x80, 0x08})                // IncreaseSize by MinInt32
	f.Add(uint8(11), []byte{0x0a, 0x04, 'h', '1', '0', '0', 0x10, 0xff, 0x01}) // DecreaseTargetSize by +255
	f.Fuzz(func(t *testing.T, which uint8, data []byte) {
		m := fuzzMethods[int(which)%len(fuzzMethods)]
		req := m.req()
		if err := proto.Unmarshal(data, req); err != nil {
			return // not a request cluster-autoscaler can send
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := fx.conn.Invoke(ctx, m.name, req, m.resp())
		if err == nil {
			return
		}
		if st, ok := status.FromError(err); !ok || st.Code() == codes.Unknown {
			t.Fatalf("%s(%v): error without a status code: %v", m.name, req, err)
		}
	})
}
