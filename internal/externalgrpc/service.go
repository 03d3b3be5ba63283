// Package externalgrpc serves cluster-autoscaler's external gRPC
// CloudProvider API over the node-group core. It is a translation layer: it
// maps requests to core calls and core answers and errors to the wire, and
// makes no scaling decision of its own.
package externalgrpc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscaler/gpuscaler/internal/config"
	"github.com/gpuscaler/gpuscaler/internal/inforce"
	"github.com/gpuscaler/gpuscaler/internal/nodegroup"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// Core is what the service needs from the node-group core;
// *nodegroup.Manager implements it.
type Core interface {
	Groups() []nodegroup.Info
	Group(name string) (nodegroup.Info, bool)
	GroupForProviderID(providerID string) (group string, ok bool)
	TargetSize(group string) (int, error)
	IncreaseSize(ctx context.Context, group string, delta int) error
	DecreaseTargetSize(ctx context.Context, group string, delta int) error
	DeleteNodes(ctx context.Context, group string, providerIDs []string) error
	// EachInstance calls fn with each of a group's instances (without
	// their aliases), in no order; fn must not call the Core.
	EachInstance(group string, fn func(nodegroup.Instance)) error
	Template(group string) (*corev1.Node, error)
	NodePrice(providerID string, labels map[string]string, start, end time.Time) (float64, error)
	PodPrice(pod *corev1.Pod, start, end time.Time) (float64, error)
	GPUTypes() []string
	Refresh(ctx context.Context) error
}

// service implements pb.CloudProviderServer.
type service struct {
	pb.UnimplementedCloudProviderServer
	core     inforce.Core[Core]
	gpuLabel string
	options  func(group string) (*config.AutoscalingOptions, bool)
}

// NodeGroups lists every configured group.
func (s *service) NodeGroups(context.Context, *pb.NodeGroupsRequest) (*pb.NodeGroupsResponse, error) {
	groups := s.core.Read().Groups()
	out := make([]*pb.NodeGroup, len(groups))
	for i, g := range groups {
		out[i] = toNodeGroup(g)
	}
	return &pb.NodeGroupsResponse{NodeGroups: out}, nil
}

func toNodeGroup(g nodegroup.Info) *pb.NodeGroup {
	return &pb.NodeGroup{Id: g.Name, MinSize: int32(g.MinSize), MaxSize: int32(g.MaxSize), Debug: g.Debug}
}

// NodeGroupForNode resolves a node by provider ID; nodes gpuscaler does not
// manage (control plane, other pools) get an empty NodeGroup, not an error.
func (s *service) NodeGroupForNode(_ context.Context, req *pb.NodeGroupForNodeRequest) (*pb.NodeGroupForNodeResponse, error) {
	core := s.core.Read() // one core answers both lookups, across a reload
	name, ok := core.GroupForProviderID(req.GetNode().GetProviderID())
	if !ok {
		return &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}, nil
	}
	g, ok := core.Group(name)
	if !ok {
		return &pb.NodeGroupForNodeResponse{NodeGroup: &pb.NodeGroup{}}, nil
	}
	return &pb.NodeGroupForNodeResponse{NodeGroup: toNodeGroup(g)}, nil
}

// PricingNodePrice prices a node (or template node) over a period.
func (s *service) PricingNodePrice(_ context.Context, req *pb.PricingNodePriceRequest) (*pb.PricingNodePriceResponse, error) {
	n := req.GetNode()
	price, err := s.core.Read().NodePrice(n.GetProviderID(), n.GetLabels(), req.GetStartTimestamp().AsTime(), req.GetEndTimestamp().AsTime())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PricingNodePriceResponse{Price: price}, nil
}

// PricingPodPrice prices a pod over a period.
func (s *service) PricingPodPrice(_ context.Context, req *pb.PricingPodPriceRequest) (*pb.PricingPodPriceResponse, error) {
	pod := &corev1.Pod{}
	if err := pod.Unmarshal(req.GetPodBytes()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pod_bytes: %v", err)
	}
	price, err := s.core.Read().PodPrice(pod, req.GetStartTimestamp().AsTime(), req.GetEndTimestamp().AsTime())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.PricingPodPriceResponse{Price: price}, nil
}

// GPULabel returns the label key GPU nodes and templates carry.
func (s *service) GPULabel(context.Context, *pb.GPULabelRequest) (*pb.GPULabelResponse, error) {
	return &pb.GPULabelResponse{Label: s.gpuLabel}, nil
}

// GetAvailableGPUTypes returns the GPU label values of all groups.
func (s *service) GetAvailableGPUTypes(context.Context, *pb.GetAvailableGPUTypesRequest) (*pb.GetAvailableGPUTypesResponse, error) {
	types := map[string]*anypb.Any{}
	for _, t := range s.core.Read().GPUTypes() {
		types[t] = &anypb.Any{}
	}
	return &pb.GetAvailableGPUTypesResponse{GpuTypes: types}, nil
}

// Cleanup is called when cluster-autoscaler exits; nothing to release.
func (s *service) Cleanup(context.Context, *pb.CleanupRequest) (*pb.CleanupResponse, error) {
	return &pb.CleanupResponse{}, nil
}

// Refresh never fails and never waits on a cloud.
func (s *service) Refresh(ctx context.Context, _ *pb.RefreshRequest) (*pb.RefreshResponse, error) {
	if err := s.core.Read().Refresh(ctx); err != nil {
		return nil, toStatus(err)
	}
	return &pb.RefreshResponse{}, nil
}

// NodeGroupTargetSize answers from memory.
func (s *service) NodeGroupTargetSize(_ context.Context, req *pb.NodeGroupTargetSizeRequest) (*pb.NodeGroupTargetSizeResponse, error) {
	n, err := s.core.Read().TargetSize(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupTargetSizeResponse{TargetSize: int32(n)}, nil
}

// NodeGroupIncreaseSize records the new target and returns; instances are
// created in the background.
func (s *service) NodeGroupIncreaseSize(ctx context.Context, req *pb.NodeGroupIncreaseSizeRequest) (*pb.NodeGroupIncreaseSizeResponse, error) {
	if err := s.core.Write(ctx, func(c Core) error { return c.IncreaseSize(ctx, req.GetId(), int(req.GetDelta())) }); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupIncreaseSizeResponse{}, nil
}

// NodeGroupDeleteNodes deletes nodes by provider ID (fake nodes for
// unregistered or failed instances carry only that).
func (s *service) NodeGroupDeleteNodes(ctx context.Context, req *pb.NodeGroupDeleteNodesRequest) (*pb.NodeGroupDeleteNodesResponse, error) {
	ids := make([]string, 0, len(req.GetNodes()))
	for _, n := range req.GetNodes() {
		id := n.GetProviderID()
		if id == "" {
			return nil, status.Errorf(codes.InvalidArgument, "node %q has no providerID", n.GetName())
		}
		ids = append(ids, id)
	}
	if err := s.core.Write(ctx, func(c Core) error { return c.DeleteNodes(ctx, req.GetId(), ids) }); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupDeleteNodesResponse{}, nil
}

// NodeGroupDecreaseTargetSize withdraws unfulfilled orders.
func (s *service) NodeGroupDecreaseTargetSize(ctx context.Context, req *pb.NodeGroupDecreaseTargetSizeRequest) (*pb.NodeGroupDecreaseTargetSizeResponse, error) {
	if err := s.core.Write(ctx, func(c Core) error { return c.DecreaseTargetSize(ctx, req.GetId(), int(req.GetDelta())) }); err != nil {
		return nil, toStatus(err)
	}
	return &pb.NodeGroupDecreaseTargetSizeResponse{}, nil
}

// NodeGroupNodes lists a group's instances with their state and, for
// instances that could not be created, the error class.
func (s *service) NodeGroupNodes(_ context.Context, req *pb.NodeGroupNodesRequest) (*pb.NodeGroupNodesResponse, error) {
	var out []*pb.Instance
	err := s.core.Read().EachInstance(req.GetId(), func(in nodegroup.Instance) {
		st := &pb.InstanceStatus{InstanceState: pb.InstanceStatus_InstanceState(in.State)}
		if in.ErrorCode != "" {
			st.ErrorInfo = &pb.InstanceErrorInfo{
				ErrorCode:          in.ErrorCode,
				ErrorMessage:       in.ErrorMessage,
				InstanceErrorClass: int32(in.ErrorClass),
			}
		}
		out = append(out, &pb.Instance{Id: in.ProviderID, Status: st})
	})
	if err != nil {
		return nil, toStatus(err)
	}
	// In a stable order, which the core's map does not give.
	slices.SortFunc(out, func(a, b *pb.Instance) int { return strings.Compare(a.GetId(), b.GetId()) })
	return &pb.NodeGroupNodesResponse{Instances: out}, nil
}

// NodeGroupTemplateNodeInfo returns the group's template node, serialized
// as cluster-autoscaler 1.35+ reads it. It is never empty.
func (s *service) NodeGroupTemplateNodeInfo(_ context.Context, req *pb.NodeGroupTemplateNodeInfoRequest) (*pb.NodeGroupTemplateNodeInfoResponse, error) {
	node, err := s.core.Read().Template(req.GetId())
	if err != nil {
		return nil, toStatus(err)
	}
	if node == nil {
		return nil, status.Errorf(codes.Internal, "node group %q has no template", req.GetId())
	}
	b, err := node.Marshal()
	if err != nil || len(b) == 0 {
		return nil, status.Errorf(codes.Internal, "serialize template of %q: %v", req.GetId(), err)
	}
	return &pb.NodeGroupTemplateNodeInfoResponse{NodeBytes: b}, nil
}

// NodeGroupGetOptions answers Unimplemented for groups without overrides,
// so cluster-autoscaler keeps its flag defaults; for the others it starts
// from the defaults sent and applies the overrides, so no field is zero by
// accident.
func (s *service) NodeGroupGetOptions(_ context.Context, req *pb.NodeGroupAutoscalingOptionsRequest) (*pb.NodeGroupAutoscalingOptionsResponse, error) {
	if _, err := s.core.Read().TargetSize(req.GetId()); err != nil {
		return nil, toStatus(err)
	}
	var o *config.AutoscalingOptions
	ok := false
	if s.options != nil {
		o, ok = s.options(req.GetId())
	}
	if !ok || o == nil {
		return nil, status.Errorf(codes.Unimplemented, "node group %q has no option overrides", req.GetId())
	}
	d := req.GetDefaults()
	out := &pb.NodeGroupAutoscalingOptions{
		ScaleDownUtilizationThreshold:    d.GetScaleDownUtilizationThreshold(),
		ScaleDownGpuUtilizationThreshold: d.GetScaleDownGpuUtilizationThreshold(),
		ZeroOrMaxNodeScaling:             d.GetZeroOrMaxNodeScaling(),
		IgnoreDaemonSetsUtilization:      d.GetIgnoreDaemonSetsUtilization(),
		ScaleDownUnneededDuration:        d.GetScaleDownUnneededDuration(),
		ScaleDownUnreadyDuration:         d.GetScaleDownUnreadyDuration(),
		MaxNodeProvisionDuration:         d.GetMaxNodeProvisionDuration(),
	}
	if o.ScaleDownUtilizationThreshold != nil {
		out.ScaleDownUtilizationThreshold = *o.ScaleDownUtilizationThreshold
	}
	if o.ScaleDownGPUUtilizationThreshold != nil {
		out.ScaleDownGpuUtilizationThreshold = *o.ScaleDownGPUUtilizationThreshold
	}
	if o.ZeroOrMaxNodeScaling != nil {
		out.ZeroOrMaxNodeScaling = *o.ZeroOrMaxNodeScaling
	}
	if o.IgnoreDaemonSetsUtilization != nil {
		out.IgnoreDaemonSetsUtilization = *o.IgnoreDaemonSetsUtilization
	}
	if o.ScaleDownUnneededTime != nil {
		out.ScaleDownUnneededDuration = durationpb.New(o.ScaleDownUnneededTime.Duration)
	}
	if o.ScaleDownUnreadyTime != nil {
		out.ScaleDownUnreadyDuration = durationpb.New(o.ScaleDownUnreadyTime.Duration)
	}
	if o.MaxNodeProvisionTime != nil {
		out.MaxNodeProvisionDuration = durationpb.New(o.MaxNodeProvisionTime.Duration)
	}
	return &pb.NodeGroupAutoscalingOptionsResponse{NodeGroupAutoscalingOptions: out}, nil
}

// toStatus maps core errors to gRPC codes.
func toStatus(err error) error {
	code := codes.Internal
	switch {
	case errors.Is(err, nodegroup.ErrGroupNotFound):
		code = codes.NotFound
	case errors.Is(err, nodegroup.ErrSizeLimit), errors.Is(err, nodegroup.ErrInvalidDelta):
		code = codes.InvalidArgument
	case errors.Is(err, nodegroup.ErrNotInGroup):
		code = codes.FailedPrecondition
	case errors.Is(err, nodegroup.ErrCostLimit):
		code = codes.ResourceExhausted
	case errors.Is(err, nodegroup.ErrUnavailable):
		code = codes.Unavailable
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	}
	return status.Error(code, err.Error())
}
