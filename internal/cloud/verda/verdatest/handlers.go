package verdatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscaler/gpuscaler/internal/cloud"
)

// instanceJSON renders an engine instance the way the API does.
func (s *Server) instanceJSON(in cloud.Instance, m *meta) map[string]any {
	s.mu.Lock()
	lost, volume := m.lost, volumeID(m)
	overrides := maps.Clone(s.overrides[m.hostname])
	s.mu.Unlock()
	status := "running"
	switch in.State {
	case cloud.StatePending:
		// ordered for the first part of the boot, provisioning after.
		status = "ordered"
		if time.Since(m.pendingSince) > 200*time.Millisecond {
			status = "provisioning"
		}
	case cloud.StateDeleting:
		status = "deleting"
	case cloud.StateFailed:
		status = "error"
	}
	if lost != "" && in.State != cloud.StateDeleting {
		status = lost
	}
	var ip any
	if in.State == cloud.StateRunning {
		ip = in.IP
	}
	var price float64
	for _, t := range s.engine.Catalog() {
		if t.Name == in.InstanceType {
			price = t.Price(in.CapacityType)
		}
	}
	tags := m.tags
	if tags == nil {
		tags = []tag{}
	}
	out := map[string]any{
		"id": m.id, "instance_type": in.InstanceType, "status": status,
		"created_at": m.createdAt.UTC().Format("2006-01-02T15:04:05.000Z"), "ip": ip,
		"hostname": m.hostname, "description": m.description, "location": in.Location,
		"price_per_hour": price, "is_spot": in.CapacityType == cloud.Spot, "contract": m.contract, "pricing": m.pricing,
		"image": m.image, "startup_script_id": m.scriptID, "ssh_key_ids": m.sshKeyIDs, "os_volume_id": volume,
		"tags": tags,
	}
	for field, raw := range overrides {
		out[field] = raw
	}
	return out
}

// live returns the account's instances with their metadata, forgetting
// those the engine no longer has.
func (s *Server) live() ([]cloud.Instance, map[string]*meta) {
	snapshot := time.Now()
	insts := s.engine.Instances(account)
	s.mu.Lock()
	defer s.mu.Unlock()
	present := map[string]bool{}
	metas := map[string]*meta{}
	var out []cloud.Instance
	for _, in := range insts {
		id, ok := s.byName[in.Name]
		if !ok {
			continue
		}
		present[id] = true
		metas[in.Name] = s.meta[id]
		out = append(out, in)
	}
	for id, m := range s.meta {
		// An instance created after the engine's snapshot is not in it,
		// and is not gone.
		if !present[id] && m.pendingSince.Before(snapshot) {
			delete(s.meta, id)
			delete(s.byName, m.hostname)
			s.gone = append(s.gone, m)
		}
	}
	return out, metas
}

func (s *Server) listInstances(w http.ResponseWriter, r *http.Request) {
	insts, metas := s.live()
	want := r.URL.Query().Get("status")
	out := []map[string]any{}
	for _, in := range insts {
		j := s.instanceJSON(in, metas[in.Name])
		if want != "" && j["status"] != want {
			continue
		}
		out = append(out, j)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getInstance(w http.ResponseWriter, id string) {
	insts, metas := s.live()
	for _, in := range insts {
		if metas[in.Name].id == id {
			writeJSON(w, http.StatusOK, s.instanceJSON(in, metas[in.Name]))
			return
		}
	}
	apiError(w, http.StatusNotFound, "not_found", "Instance not found")
}

// createBody is POST /instances; nulls are accepted where the SDKs send them.
type createBody struct {
	InstanceType    string   `json:"instance_type"`
	Image           string   `json:"image"`
	Hostname        string   `json:"hostname"`
	Description     string   `json:"description"`
	LocationCode    *string  `json:"location_code"`
	SSHKeyIDs       []string `json:"ssh_key_ids"`
	StartupScriptID *string  `json:"startup_script_id"`
	IsSpot          bool     `json:"is_spot"`
	Contract        string   `json:"contract"`
	Pricing         string   `json:"pricing"`
	Tags            []tag    `json:"tags"`
	OSVolume        *struct {
		Size              int    `json:"size"`
		OnSpotDiscontinue string `json:"on_spot_discontinue"`
	} `json:"os_volume"`
}

func (s *Server) createInstance(w http.ResponseWriter, r *http.Request) {
	var b createBody
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "body is not valid json: "+err.Error())
		return
	}
	switch {
	case b.InstanceType == "" || b.Image == "" || b.Hostname == "" || b.Description == "":
		apiError(w, http.StatusBadRequest, "invalid_request", "instance_type, image, hostname and description are required")
		return
	case b.LocationCode == nil || *b.LocationCode == "":
		apiError(w, http.StatusBadRequest, "invalid_request", "location_code is required")
		return
	case len(b.Tags) > 10:
		apiError(w, http.StatusBadRequest, "invalid_request", "at most 10 tags")
		return
	}
	if os := supportedOS(b.InstanceType); len(os) > 0 && !slices.Contains(os, b.Image) {
		apiError(w, http.StatusBadRequest, "invalid_request", fmt.Sprintf("Image %s is not supported for instance type %s", b.Image, b.InstanceType))
		return
	}
	if b.StartupScriptID != nil {
		s.mu.Lock()
		_, ok := s.scripts[*b.StartupScriptID]
		s.mu.Unlock()
		if !ok {
			apiError(w, http.StatusBadRequest, "invalid_request", "startup script not found")
			return
		}
	}
	s.mu.Lock()
	limit := s.opts.InstanceLimit
	s.mu.Unlock()
	if insts, _ := s.live(); len(insts) >= limit {
		apiError(w, http.StatusBadRequest, "invalid_request", "Instance limit exceeded")
		return
	}
	ct := cloud.OnDemand
	if b.IsSpot || b.Contract == "SPOT" {
		ct = cloud.Spot
	}
	in, err := s.acct.Create(r.Context(), cloud.CreateSpec{
		Name: b.Hostname, Group: descriptionGroup(b.Description), InstanceType: b.InstanceType, Location: *b.LocationCode, CapacityType: ct,
	})
	switch {
	case errors.Is(err, cloud.ErrCapacity):
		gpus := strings.TrimRightFunc(strings.SplitN(b.InstanceType, ".", 2)[0], func(r rune) bool { return r < '0' || r > '9' })
		apiError(w, http.StatusServiceUnavailable, "service_unavailable",
			fmt.Sprintf("Not enough resources to deploy a %s GPU instance type %s in %s", gpus, b.InstanceType, *b.LocationCode))
		return
	case errors.Is(err, cloud.ErrInvalid):
		apiError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	case err != nil:
		apiError(w, http.StatusInternalServerError, "server_error", err.Error())
		return
	}
	m := &meta{
		id: s.ids.UUID(), hostname: b.Hostname, description: b.Description, image: b.Image, contract: b.Contract,
		pricing: b.Pricing, scriptID: b.StartupScriptID, sshKeyIDs: b.SSHKeyIDs, tags: b.Tags,
		createdAt: in.CreatedAt, pendingSince: time.Now(), volumeID: s.ids.UUID(), onSpotDiscontinue: "keep_detached",
	}
	if b.OSVolume != nil && b.OSVolume.OnSpotDiscontinue != "" {
		m.onSpotDiscontinue = b.OSVolume.OnSpotDiscontinue
	}
	if m.sshKeyIDs == nil {
		m.sshKeyIDs = []string{}
	}
	s.mu.Lock()
	s.meta[m.id] = m
	s.byName[b.Hostname] = m.id
	if s.volumes == nil {
		s.volumes = map[string]bool{}
	}
	s.volumes[m.volumeID] = true
	s.mu.Unlock()
	if s.opts.CreateAnswersJSON {
		writeJSON(w, http.StatusAccepted, s.instanceJSON(in, m))
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusAccepted)
	_, _ = w.Write([]byte(m.id))
}

// action serves PUT /instances; "id" may be a string or an array.
func (s *Server) action(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Action    string          `json:"action"`
		ID        json.RawMessage `json:"id"`
		VolumeIDs json.RawMessage `json:"volume_ids"`
	}
	if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request", "body is not valid json")
		return
	}
	var ids []string
	if err := json.Unmarshal(b.ID, &ids); err != nil {
		var one string
		if err := json.Unmarshal(b.ID, &one); err != nil || one == "" {
			apiError(w, http.StatusBadRequest, "invalid_request", "id must be a string or an array of strings")
			return
		}
		ids = []string{one}
	}
	if b.Action != "delete" {
		apiError(w, http.StatusBadRequest, "invalid_request", "only delete is simulated")
		return
	}
	insts, metas := s.live()
	byID := map[string]cloud.Instance{}
	for _, in := range insts {
		byID[metas[in.Name].id] = in
	}
	var results []map[string]any
	missing, refused := 0, 0
	for _, id := range ids {
		in, ok := byID[id]
		if !ok {
			missing++
			results = append(results, map[string]any{"action": "delete", "instanceId": id, "status": "error", "error": "Instance not found", "statusCode": 404})
			continue
		}
		if f, ok := s.takeDeleteFault(in.Name); ok {
			refused++
			results = append(results, map[string]any{"action": "delete", "instanceId": id, "status": "error", "error": f.message, "statusCode": f.status})
			continue
		}
		if err := s.acct.Delete(r.Context(), in); err != nil {
			apiError(w, http.StatusInternalServerError, "server_error", err.Error())
			return
		}
		volumes := b.VolumeIDs
		if volumes == nil {
			volumes = json.RawMessage("null")
		}
		s.mu.Lock()
		if m := s.meta[id]; m != nil {
			m.deleteVolumes = volumes
			// null: the API's default deletes the OS volume; a list deletes
			// those named; [] deletes none.
			var named []string
			_ = json.Unmarshal(volumes, &named)
			if string(volumes) == "null" || slices.Contains(named, m.volumeID) {
				delete(s.volumes, m.volumeID)
			}
			for _, v := range named {
				delete(s.volumes, v)
			}
		}
		s.mu.Unlock()
		results = append(results, map[string]any{"action": "delete", "instanceId": id, "status": "success", "statusCode": 202})
	}
	switch {
	case missing == len(ids):
		apiError(w, http.StatusNotFound, "not_found", "Instance not found")
	case missing+refused > 0:
		writeJSON(w, http.StatusMultiStatus, results)
	default:
		writeJSON(w, http.StatusAccepted, results)
	}
}

// instanceTypes serves the recorded listing as it is.
func (s *Server) instanceTypes(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(instanceTypesJSON)
}

func (s *Server) availability(w http.ResponseWriter, r *http.Request, instanceType string) {
	offs, err := s.acct.Offerings(r.Context())
	if err != nil {
		apiError(w, http.StatusServiceUnavailable, "service_unavailable", err.Error())
		return
	}
	ct := cloud.OnDemand
	if isSpot(r) {
		ct = cloud.Spot
	}
	loc := r.URL.Query().Get("location_code")
	if instanceType != "" {
		ok := false
		for _, o := range offs {
			if o.InstanceType == instanceType && o.CapacityType == ct && o.Available && (loc == "" || o.Location == loc) {
				ok = true
			}
		}
		writeJSON(w, http.StatusOK, ok)
		return
	}
	by := map[string][]string{}
	for _, l := range s.engine.Locations() {
		if loc == "" || l == loc {
			by[l] = []string{}
		}
	}
	for _, o := range offs {
		if _, want := by[o.Location]; want && o.CapacityType == ct && o.Available {
			by[o.Location] = append(by[o.Location], o.InstanceType)
		}
	}
	var out []map[string]any
	for l, types := range by {
		out = append(out, map[string]any{"location_code": l, "availabilities": types})
	}
	sort.Slice(out, func(i, j int) bool { return out[i]["location_code"].(string) < out[j]["location_code"].(string) })
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) locations(w http.ResponseWriter) {
	out := []map[string]any{}
	for _, l := range s.engine.Locations() {
		out = append(out, map[string]any{"code": l, "name": l, "country_code": l[:2]})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) scriptsAPI(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && id == "":
		all := make([]*script, 0, len(s.scripts))
		for _, sc := range s.scripts {
			all = append(all, sc)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].ID < all[j].ID })
		page, _ := strconv.Atoi(r.URL.Query().Get("page"))
		size, _ := strconv.Atoi(r.URL.Query().Get("pageSize"))
		page, size = max(page, 1), min(max(size, 1), 100)
		if r.URL.Query().Get("pageSize") == "" {
			size = 100
		}
		if s.opts.IgnoreScriptPaging {
			writeJSON(w, http.StatusOK, all[:min(100, len(all))])
			return
		}
		from := min((page-1)*size, len(all))
		to := min(from+size, len(all))
		w.Header().Set("X-Total-Count", strconv.Itoa(len(all)))
		w.Header().Set("X-Page", strconv.Itoa(page))
		w.Header().Set("X-Page-Size", strconv.Itoa(size))
		writeJSON(w, http.StatusOK, all[from:to])
	case r.Method == http.MethodGet:
		sc, ok := s.scripts[id]
		if !ok {
			apiError(w, http.StatusNotFound, "not_found", "Script not found")
			return
		}
		writeJSON(w, http.StatusOK, []*script{sc})
	case r.Method == http.MethodPost && id == "":
		var b struct{ Name, Script string }
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil || b.Name == "" || b.Script == "" {
			apiError(w, http.StatusBadRequest, "invalid_request", "name and script are required")
			return
		}
		if len(s.scripts) >= s.opts.ScriptLimit {
			apiError(w, http.StatusBadRequest, "invalid_request", "Startup script limit exceeded")
			return
		}
		sc := &script{ID: s.ids.UUID(), Name: b.Name, Script: b.Script, CreatedAt: time.Now().UTC().Format(time.RFC3339)}
		s.scripts[sc.ID] = sc
		if s.opts.CreateAnswersJSON {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(sc)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(sc.ID))
	case r.Method == http.MethodDelete && id != "":
		if _, ok := s.scripts[id]; !ok {
			apiError(w, http.StatusNotFound, "not_found", "Script not found")
			return
		}
		delete(s.scripts, id)
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodDelete:
		var b struct{ Scripts []string }
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			apiError(w, http.StatusBadRequest, "invalid_request", "body is not valid json")
			return
		}
		for _, id := range b.Scripts {
			delete(s.scripts, id)
		}
		w.WriteHeader(http.StatusOK)
	default:
		apiError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
	}
}

// volumeID renders an instance's OS volume id, null once it has none.
func volumeID(m *meta) any {
	if m.volumeID == "" {
		return nil
	}
	return m.volumeID
}

// descriptionGroup is the group a description "... group=<name>" names,
// so that the engine's view groups instances as the autoscaler does.
func descriptionGroup(desc string) string {
	for _, f := range strings.Fields(desc) {
		if g, ok := strings.CutPrefix(f, "group="); ok {
			return g
		}
	}
	return ""
}
