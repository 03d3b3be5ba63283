// Package simulate runs gpuscaler's real node-group core, its real
// NodeProvisioner planner and the simulated cloud on a virtual clock
// against a workload trace, and a cluster-autoscaler-like baseline on the
// same trace, and reports what each makes pods wait and what it costs.
package simulate

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod is one workload of a trace: it arrives, waits until a node has room,
// then runs for its duration.
type Pod struct {
	Name string
	// At is when it arrives, from the trace's start.
	At time.Duration
	// Duration is how long it runs once it is placed.
	Duration time.Duration
	// GPUs is how many whole GPUs it requests (nvidia.com/gpu).
	GPUs int
	// MIG is a MIG profile it requests one of instead ("1g.10gb" for
	// nvidia.com/mig-1g.10gb); empty for whole GPUs.
	MIG string
	// Priority orders pending pods: higher first.
	Priority int
	// Image is the container image it runs, ImageGB its size: a node
	// pulls it before the pod starts, unless it holds it already (an
	// earlier pod's pull, a standby pool's prePullImages). Empty: nothing
	// to pull.
	Image   string
	ImageGB float64
	// Tolerates are the keys of the taints it tolerates (a toleration
	// with operator Exists for each): nil tolerates every taint, as a
	// trace that names none lands its pods wherever they fit; empty, none.
	Tolerates []string
}

// Trace is a workload: its pods by arrival.
type Trace struct {
	Name string
	Pods []Pod
}

// End is when the last pod arrives.
func (t Trace) End() time.Duration {
	var end time.Duration
	for _, p := range t.Pods {
		end = max(end, p.At)
	}
	return end
}

// images are the images the trace's pods run, with their sizes in GB
// (the largest a trace gives an image).
func (t Trace) images() map[string]float64 {
	out := map[string]float64{}
	for _, p := range t.Pods {
		if p.Image != "" {
			out[p.Image] = max(out[p.Image], p.ImageGB)
		}
	}
	return out
}

// LineError is a trace line that could not be read.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e *LineError) Unwrap() error { return e.Err }

// jsonPod is a JSONL line.
type jsonPod struct {
	Name     string   `json:"name"`
	At       string   `json:"at"`
	Duration string   `json:"duration"`
	GPUs     *int     `json:"gpus"`
	MIG      string   `json:"mig"`
	Priority int      `json:"priority"`
	Image    string   `json:"image"`
	ImageGB  *float64 `json:"image_gb"`
	// Tolerates is nil when the line has no "tolerates": every taint.
	Tolerates []string `json:"tolerates"`
}

// csvColumns are the CSV format's columns, in the header's order.
var csvColumns = []string{"at", "duration", "gpus", "mig", "priority", "name", "image", "image_gb", "tolerates"}

// Read reads a trace in CSV (a header line naming the columns at,
// duration, gpus, mig, priority, name, image, image_gb, tolerates; at and
// duration are Go durations such as 90s or 1h30m, or seconds; image_gb
// the image's size in GB; tolerates the taint keys the pod tolerates,
// separated by "|", "-" for none, empty for every taint) or JSON Lines
// (one object per line with the same keys, tolerates a list of keys);
// format is "csv" or "jsonl". Blank lines and lines
// starting with # are skipped. A line that cannot be read fails the whole
// trace with its line number.
func Read(r io.Reader, name, format string) (Trace, error) {
	t := Trace{Name: name}
	var err error
	switch format {
	case "csv":
		t.Pods, err = readCSV(r)
	case "jsonl":
		t.Pods, err = readJSONL(r)
	default:
		return t, fmt.Errorf("trace format %q: want csv or jsonl", format)
	}
	if err != nil {
		return t, err
	}
	if len(t.Pods) == 0 {
		return t, errors.New("trace has no pods")
	}
	slices.SortStableFunc(t.Pods, func(a, b Pod) int { return int(a.At - b.At) })
	return t, nil
}

func readJSONL(r io.Reader) ([]Pod, error) {
	var pods []Pod
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		var jp jsonPod
		dec := json.NewDecoder(strings.NewReader(text))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&jp); err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		gpus := ""
		if jp.GPUs != nil {
			gpus = strconv.Itoa(*jp.GPUs)
		}
		size := ""
		if jp.ImageGB != nil {
			size = strconv.FormatFloat(*jp.ImageGB, 'g', -1, 64)
		}
		p, err := parsePod(len(pods), podFields{name: jp.Name, at: jp.At, duration: jp.Duration, gpus: gpus, mig: jp.MIG,
			priority: strconv.Itoa(jp.Priority), image: jp.Image, imageGB: size, keys: jp.Tolerates})
		if err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		pods = append(pods, p)
	}
	return pods, sc.Err()
}

func readCSV(r io.Reader) ([]Pod, error) {
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	header, err := cr.Read()
	if err != nil {
		return nil, &LineError{Line: csvLine(err, 1), Err: fmt.Errorf("header: %w", err)}
	}
	headerLine, _ := cr.FieldPos(0)
	col := map[string]int{}
	for i, h := range header {
		h = strings.ToLower(strings.TrimSpace(h))
		if !slices.Contains(csvColumns, h) {
			line, _ := cr.FieldPos(i)
			return nil, &LineError{Line: line, Err: fmt.Errorf("unknown column %q (want %s)", h, strings.Join(csvColumns, ", "))}
		}
		col[h] = i
	}
	for _, need := range []string{"at", "duration"} {
		if _, ok := col[need]; !ok {
			return nil, &LineError{Line: headerLine, Err: fmt.Errorf("header has no %q column", need)}
		}
	}
	var pods []Pod
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return pods, nil
		}
		if err != nil {
			return nil, &LineError{Line: csvLine(err, headerLine+1), Err: err}
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(header) {
			return nil, &LineError{Line: line, Err: fmt.Errorf("%d fields, the header has %d", len(rec), len(header))}
		}
		field := func(name string) string {
			if i, ok := col[name]; ok {
				return strings.TrimSpace(rec[i])
			}
			return ""
		}
		p, err := parsePod(len(pods), podFields{name: field("name"), at: field("at"), duration: field("duration"), gpus: field("gpus"),
			mig: field("mig"), priority: field("priority"), image: field("image"), imageGB: field("image_gb"), tolerates: field("tolerates")})
		if err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		pods = append(pods, p)
	}
}

// csvLine is the line a CSV reader's error is on; fallback when it does
// not say.
func csvLine(err error, fallback int) int {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return pe.Line
	}
	return fallback
}

// maxTime bounds a trace's times: a year.
const maxTime = 365 * 24 * time.Hour

// podFields are one line's fields, as written.
type podFields struct {
	name, at, duration, gpus, mig, priority, image, imageGB, tolerates string
	// keys are JSON Lines' tolerates, a list (nil: the line has none);
	// tolerates is CSV's, as written.
	keys []string
}

// noTaints is a CSV tolerates that tolerates no taint: no taint key can
// be it.
const noTaints = "-"

// maxImageGB bounds an image's size: no container image comes near it.
const maxImageGB = 1000

// parsePod checks one line's fields. A pod asks for whole GPUs (1 when neither
// gpus nor mig is given) or one MIG slice, not both; an image comes with
// its size.
func parsePod(i int, f podFields) (Pod, error) {
	name, at, duration, gpus, mig, priority := f.name, f.at, f.duration, f.gpus, f.mig, f.priority
	p := Pod{Name: name, MIG: mig, Image: f.image}
	if p.Name == "" {
		p.Name = fmt.Sprintf("pod-%06d", i)
	}
	var err error
	if p.At, err = parseDuration(at); err != nil {
		return p, fmt.Errorf("at: %w", err)
	}
	if p.Duration, err = parseDuration(duration); err != nil {
		return p, fmt.Errorf("duration: %w", err)
	}
	if p.Duration <= 0 {
		return p, fmt.Errorf("duration: %s: want more than 0", duration)
	}
	switch {
	case gpus != "" && mig != "":
		return p, errors.New("gpus and mig: a pod asks for whole GPUs or one MIG slice, not both")
	case gpus != "":
		if p.GPUs, err = strconv.Atoi(gpus); err != nil || p.GPUs < 1 || p.GPUs > 16 {
			return p, fmt.Errorf("gpus: %q: want a whole number from 1 to 16", gpus)
		}
	case mig == "":
		p.GPUs = 1
	default:
		if !migProfile(mig) {
			return p, fmt.Errorf("mig: %q: want a profile such as 1g.10gb", mig)
		}
	}
	if priority != "" {
		pr, err := strconv.ParseInt(priority, 10, 32)
		if err != nil {
			return p, fmt.Errorf("priority: %q: want a whole number that fits 32 bits, as a pod's priority", priority)
		}
		p.Priority = int(pr)
	}
	switch {
	case f.image == "" && f.imageGB != "":
		return p, errors.New("image_gb without an image: name the image whose size it is")
	case f.image != "":
		gb, err := strconv.ParseFloat(f.imageGB, 64)
		if f.imageGB == "" || err != nil || math.IsNaN(gb) || gb < 0 || gb > maxImageGB {
			return p, fmt.Errorf("image_gb: %q: want the image's size in GB, 0 to %d (its pull takes size / --pull-rate)", f.imageGB, maxImageGB)
		}
		p.ImageGB = gb
	}
	if f.keys != nil {
		p.Tolerates, err = slices.Clip(f.keys), taintKeys(f.keys)
	} else {
		p.Tolerates, err = parseTolerates(f.tolerates)
	}
	if err != nil {
		return p, fmt.Errorf("tolerates: %w", err)
	}
	return p, nil
}

// parseTolerates reads a tolerates field: nil for "" (every taint), none
// for noTaints, else the "|"-separated keys, each a taint key.
func parseTolerates(s string) ([]string, error) {
	switch s {
	case "":
		return nil, nil
	case noTaints:
		return []string{}, nil
	}
	keys := strings.Split(s, "|")
	for i, k := range keys {
		keys[i] = strings.TrimSpace(k)
	}
	return keys, taintKeys(keys)
}

// taintKeys checks that each of keys is a taint key.
func taintKeys(keys []string) error {
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("%q: want taint keys such as nvidia.com/gpu (in CSV separated by |, or %q for none): %s", k, noTaints, strings.Join(errs, "; "))
		}
	}
	return nil
}

// parseDuration reads a Go duration or a number of seconds, from 0 to a
// year.
func parseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("missing")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		secs, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil || math.IsNaN(secs) || math.IsInf(secs, 0) || math.Abs(secs) > maxTime.Seconds() {
			return 0, fmt.Errorf("%q: want a duration such as 90s or 1h30m, or seconds, up to a year", s)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d < 0 || d > maxTime {
		return 0, fmt.Errorf("%q: want 0 to a year", s)
	}
	return d, nil
}

// migProfile reports whether s reads as a MIG profile: "<n>g.<m>gb".
func migProfile(s string) bool {
	g, mem, ok := strings.Cut(s, "g.")
	if !ok || !strings.HasSuffix(mem, "gb") {
		return false
	}
	_, err1 := strconv.Atoi(g)
	_, err2 := strconv.Atoi(strings.TrimSuffix(mem, "gb"))
	return err1 == nil && err2 == nil
}
