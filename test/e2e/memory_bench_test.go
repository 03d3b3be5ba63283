package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/gpuscaler/gpuscaler/proto"
)

// BenchmarkProviderMemory runs `gpuscaler provider` as a process on the
// simulated cloud, fills 100 groups to 10,000 and 100,000 running instances through
// NodeGroupIncreaseSize as cluster-autoscaler would, and reports the
// process's resident memory once steady (MiB-rss, the mean of samples over
// three syncs; MiB-rss-max, the highest) and at its peak (MiB-peak, the
// kernel's high-water mark). The simulated cloud runs inside
// the process, so its instances count too.
func BenchmarkProviderMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("instances=%d", n), func(b *testing.B) { benchmarkProviderMemory(b, n) })
	}
}

// benchmarkProviderMemory measures the provider holding n instances in
// 100 groups.
func benchmarkProviderMemory(b *testing.B, n int) {
	const groups = 100
	perGroup := n / groups
	// steadyAfter lets the Go runtime return the fill's garbage to the
	// system (its scavenger works in the background) before reading.
	const steadyAfter = 20 * time.Second
	// samples of the steady state are taken sampleEvery apart: 15 s, three
	// of the config's 5 s syncs.
	const samples, sampleEvery = 30, 500 * time.Millisecond
	if gpuscalerBin == "" {
		b.Skip("needs the binary TestMain builds (not with -short)")
	}
	var doc strings.Builder
	doc.WriteString("clusterName: mem\nsync: {period: 5s, requestsPerSecond: 100000, maxConcurrentCreates: 200}\n" +
		"clouds:\n  sim: {bootDelay: 1s, deleteDelay: 1s, defaultCapacity: 100000}\nnodeGroups:\n")
	for i := range groups {
		fmt.Fprintf(&doc, "  - {name: g%03d, cloud: sim, instanceType: 1H100.80S.30V, locations: [FIN-0%d], maxSize: %d}\n", i, 1+i%3, perGroup)
	}
	for range b.N {
		dir := b.TempDir()
		cfgPath := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(cfgPath, []byte(doc.String()), 0o600); err != nil {
			b.Fatal(err)
		}
		// Start from the binary's pages out of the page cache, as a new
		// container does: otherwise every page next to one the process
		// reads is mapped too (the kernel's fault-around), and the figure
		// depends on what ran before.
		evictFromPageCache(b, gpuscalerBin)
		grpcAddr, metricsAddr := loopback(b), loopback(b)
		proc := startProcess(b, filepath.Join(dir, "provider.log"), metricsAddr, nil, "provider", "--config", cfgPath,
			"--metrics-address", metricsAddr, "--port", grpcAddr[strings.LastIndex(grpcAddr, ":")+1:], "--log-format", "json")
		conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		ca := pb.NewCloudProviderClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		for i := range groups {
			if _, err := ca.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: fmt.Sprintf("g%03d", i), Delta: int32(perGroup)}); err != nil {
				b.Fatal(err)
			}
		}
		for running := 0; running < groups*perGroup; {
			if ctx.Err() != nil {
				b.Fatalf("only %d of %d instances running", running, groups*perGroup)
			}
			time.Sleep(time.Second)
			running = 0
			for i := range groups {
				resp, err := ca.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: fmt.Sprintf("g%03d", i)})
				if err != nil {
					b.Fatal(err)
				}
				for _, in := range resp.GetInstances() {
					if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
						running++
					}
				}
			}
		}
		time.Sleep(steadyAfter)
		// The resident set rises and falls with each collection and each
		// sync's listing: steady is the mean of samples over a few syncs,
		// beside the highest of them.
		var rss, rssMax, anon, file, heap float64
		cpu0, t0 := goMetrics(b, metricsAddr)["process_cpu_seconds_total"], time.Now()
		for range samples {
			m := procMemory(b, proc.pid())
			rss += m["VmRSS:"] / samples
			rssMax = max(rssMax, m["VmRSS:"])
			anon += m["RssAnon:"] / samples
			file += m["RssFile:"] / samples
			heap += goMetrics(b, metricsAddr)["go_memstats_heap_inuse_bytes"] / (1 << 20) / samples
			time.Sleep(sampleEvery)
		}
		// What the steady state costs in CPU (syncs and collections).
		b.ReportMetric((goMetrics(b, metricsAddr)["process_cpu_seconds_total"]-cpu0)*1000/time.Since(t0).Seconds(), "cpu-ms/s")
		b.ReportMetric(rss, "MiB-rss")
		b.ReportMetric(rssMax, "MiB-rss-max")
		b.ReportMetric(procMemory(b, proc.pid())["VmHWM:"], "MiB-peak")
		b.ReportMetric(anon, "MiB-anon")
		b.ReportMetric(file, "MiB-file")
		b.ReportMetric(heap, "MiB-heap")
		b.ReportMetric(goMetrics(b, metricsAddr)["go_goroutines"], "goroutines")
		cancel()
		conn.Close()
		proc.kill()
	}
}

// procMemory reads a process's memory lines (VmRSS, VmHWM, RssAnon,
// RssFile, ...) in MiB.
func procMemory(b *testing.B, pid int) map[string]float64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[2] == "kB" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = kb / 1024
		}
	}
	return out
}

// goMetrics scrapes the Go runtime's and the process's gauges from a
// process's /metrics.
func goMetrics(b *testing.B, addr string) map[string]float64 {
	b.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 2 && (strings.HasPrefix(f[0], "go_") || strings.HasPrefix(f[0], "process_")) {
			v, _ := strconv.ParseFloat(f[1], 64)
			out[f[0]] = v
		}
	}
	return out
}

// evictFromPageCache drops a file's pages from the page cache (written
// back first), so that a process started from it reads in only what it
// uses.
func evictFromPageCache(b *testing.B, path string) {
	b.Helper()
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		b.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}
