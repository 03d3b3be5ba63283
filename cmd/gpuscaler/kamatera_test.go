package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/gpuscaler/gpuscaler/internal/cloud/kamatera/kamateratest"
	"github.com/gpuscaler/gpuscaler/internal/cloud/sim"
	pb "github.com/gpuscaler/gpuscaler/proto"
)

// TestKamateraUserSwitches runs the provider the way a user of the
// Kamatera cluster-autoscaler would: their INI cloud config as it is
// (--cloud-config), over the fake Kamatera API. The group's existing
// server is found by its tags, a scale-up orders a server with the INI's
// settings and script, and no secret reaches the (debug) logs.
func TestKamateraUserSwitches(t *testing.T) {
	t.Parallel() // its first orders wait out the start-up hold (firstOrderWait)
	const secret = "kamatera-ini-secret-0123"
	engine, err := kamateratest.NewEngine(sim.Config{BootDelay: sim.Duration(20 * time.Millisecond)}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := kamateratest.New(engine, kamateratest.Options{ClientID: "ini-id", Secret: secret, CommandDelay: 20 * time.Millisecond})
	defer fake.Close()
	if err := fake.AddServer("ng1-8c1f0e2a9b3", "EU", "2A", 4096, []string{"k8sca-mycluster", "k8scang-ng1"}); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("../../internal/config/seedconfig/testdata/kamatera-readme-disks.ini")
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Replace(data, []byte(`kamatera-api-secret = "my-kamatera-secret"`), []byte(`kamatera-api-secret = "`+secret+`"`), 1)
	data = bytes.Replace(data, []byte(`kamatera-api-client-id = "my-client-id"`), []byte("kamatera-api-client-id = \"ini-id\"\nkamatera-api-url = "+fake.URL), 1)
	path := filepath.Join(t.TempDir(), "kamatera.ini")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	port := freePort(t)
	logs := &lockedBuffer{}
	root := newRootCommand(logs, logs)
	root.SetArgs([]string{"provider", "--cloud-config", path, "--port", fmt.Sprint(port), "--log-level", "DEBUG", "--log-format", "text", "--metrics-address", "127.0.0.1:0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("provider: %v", err)
		}
		for _, s := range []string{secret, kamateratest.GeneratedPassword, "ZWNobyBqb2lu"} {
			if strings.Contains(logs.String(), s) {
				t.Errorf("a secret (%s) is in the logs:\n%s", s, logs.String())
			}
		}
	}()
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", port), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ca := pb.NewCloudProviderClient(conn)
	eventually(t, "the existing server found", func() bool {
		c, cc := context.WithTimeout(context.Background(), time.Second)
		defer cc()
		resp, err := ca.NodeGroupNodes(c, &pb.NodeGroupNodesRequest{Id: "ng1"})
		return err == nil && len(resp.GetInstances()) == 1 && resp.GetInstances()[0].GetId() == "kamatera://ng1-8c1f0e2a9b3"
	})
	groups, err := ca.NodeGroups(ctx, &pb.NodeGroupsRequest{})
	if err != nil || len(groups.GetNodeGroups()) != 2 || groups.GetNodeGroups()[1].GetMaxSize() != 254 {
		t.Fatalf("groups = %v, %v", groups, err)
	}
	if _, err := ca.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "ng2", Delta: 1}); err != nil {
		t.Fatal(err)
	}
	// ng2 keeps its INI min-size of 1, and the scale-up adds one more.
	var name string
	eventuallyWithin(t, "the ng2 servers made", firstOrderWait, func() bool {
		resp, err := ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "ng2"})
		if err != nil || len(resp.GetInstances()) != 2 {
			return false
		}
		name = strings.TrimPrefix(resp.GetInstances()[0].GetId(), "kamatera://")
		return len(fake.Servers()) == 3
	})
	if tags := fake.Tags(name); strings.Join(tags, " ") != "k8sca-mycluster k8scang-ng2" {
		t.Errorf("tags %v", tags)
	}
	if script := fake.Script(name); script != "#!/bin/bash\necho join\n" {
		t.Errorf("the INI's script-base64 was not passed through: %q", script)
	}
}

// TestCatalogKamatera lists what the account's datacenters sell.
func TestCatalogKamatera(t *testing.T) {
	engine, err := kamateratest.NewEngine(sim.Config{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fake := kamateratest.New(engine, kamateratest.Options{ClientID: "id", Secret: "catalog-secret"})
	defer fake.Close()
	t.Setenv("KAMATERA_API_CLIENT_ID", "id")
	t.Setenv("KAMATERA_API_SECRET", "catalog-secret")
	t.Setenv("KAMATERA_API_URL", fake.URL)
	var out bytes.Buffer
	root := newRootCommand(&out, &out)
	root.SetArgs([]string{"catalog", "--cloud", "kamatera"})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "8D-32768 ") {
			line = l
		}
	}
	for _, want := range []string{" 8 ", "32GiB", "EU,EU-FR,IL,US-NY2"} {
		if !strings.Contains(line, want) {
			t.Errorf("catalog line %q lacks %q", line, want)
		}
	}
}

// config convert of a Kamatera INI prints no startup script (one usually
// holds a join token, and the converted file usually lands in a
// ConfigMap): each group names a file for it (which the backend reads:
// TestScriptFileIsTheServersScript), and a note says how to fill it.
func TestConvertWithholdsKamateraScripts(t *testing.T) {
	const ini = "../../internal/config/seedconfig/testdata/kamatera-readme-disks.ini"
	var out, errOut bytes.Buffer
	root := newRootCommand(&out, &errOut)
	root.SetArgs([]string{"config", "convert", "--cloud-config", ini})
	if err := root.Execute(); err != nil {
		t.Fatalf("config convert: %v\n%s", err, errOut.String())
	}
	const encoded = "IyEvYmluL2Jhc2gKZWNobyBqb2luCg=="
	if strings.Contains(out.String(), encoded) || strings.Contains(out.String(), "echo join") {
		t.Errorf("the startup script is in the converted config:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "scriptFile: /etc/gpuscaler/scripts/ng1.sh") {
		t.Errorf("the converted group names no script file:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "startup script of nodeGroups[0] (ng1, script-base64)") {
		t.Errorf("no note on the withheld script: %s", errOut.String())
	}
	if strings.Contains(errOut.String(), encoded) {
		t.Errorf("the note prints the script: %s", errOut.String())
	}
}
