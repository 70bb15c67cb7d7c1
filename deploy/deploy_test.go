package deploy

// Offline checks of the deployment files: the kustomizations render (with
// kustomize's own Go API, the one kubectl embeds, so no binary is needed),
// every Deployment has its probes, resources, security context and
// PodDisruptionBudget, the sample tenaz.yaml is a valid tenaz config in the
// pods' environment, and the Dockerfile builds the binaries that exist.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/tenaz/tenaz/pkg/config"
)

// services are the Deployments, each named tenaz-<service>.
var services = []string{"ingest", "dispatcher", "poller", "deadletter"}

// withService are the services that also get a Service (all of them:
// /metrics is scraped through it).
var withService = services

// scaled are the services KEDA scales (components/keda): their Deployments
// set no replica count.
var scaled = []string{"dispatcher", "poller"}

const (
	port        = 8080
	configPath  = "/etc/tenaz/tenaz.yaml"
	gracePeriod = 30 // terminationGracePeriodSeconds
	nonrootUID  = 65532
)

// drain is how many seconds a service takes to drain after SIGTERM: the
// deadline daemon.Run gives Stop, stop_timeout (TestSampleConfig checks
// that the sample config keeps the default).
var drain = int(config.DefaultStopTimeout.D() / time.Second)

// obj is one decoded manifest.
type obj = map[string]any

// ---------------------------------------------------------------- helpers

// get walks a path of map keys and list indexes (ints) through v.
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(obj)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := get(v, path...).(string)
	return s
}

func list(v any, path ...any) []any {
	l, _ := get(v, path...).([]any)
	return l
}

func labels(v any, path ...any) map[string]string {
	out := map[string]string{}
	m, _ := get(v, path...).(obj)
	for k, val := range m {
		out[k] = fmt.Sprint(val)
	}
	return out
}

// selects reports whether a matchLabels selector (non-empty) matches labels.
func selects(sel, lbls map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if lbls[k] != v {
			return false
		}
	}
	return true
}

// decodeAll decodes every YAML document of data (empty documents skipped).
func decodeAll(data []byte) ([]obj, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []obj
	for {
		var doc obj
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if doc != nil {
			out = append(out, doc)
		}
	}
}

// render builds a kustomization directory as `kubectl kustomize` does and
// decodes the result.
func render(t *testing.T, dir string) []obj {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := rm.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	docs, err := decodeAll(out)
	if err != nil {
		t.Fatalf("kustomize build %s: output does not decode: %v", dir, err)
	}
	return docs
}

// rendered is the output of one kustomization, indexed.
type rendered struct {
	docs []obj
}

func (r rendered) find(kind, name string) obj {
	for _, d := range r.docs {
		if str(d, "kind") == kind && str(d, "metadata", "name") == name {
			return d
		}
	}
	return nil
}

func (r rendered) all(kind string) []obj {
	var out []obj
	for _, d := range r.docs {
		if str(d, "kind") == kind {
			out = append(out, d)
		}
	}
	return out
}

// configMap returns the rendered ConfigMap generated under name (kustomize
// adds a hash suffix to generated names and rewrites the references).
func (r rendered) configMap(name string) obj {
	if cm := r.find("ConfigMap", name); cm != nil {
		return cm
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `-[a-z0-9]{10}$`)
	for _, cm := range r.all("ConfigMap") {
		if re.MatchString(str(cm, "metadata", "name")) {
			return cm
		}
	}
	return nil
}

// quantity parses the Kubernetes quantities these manifests use (plain,
// m, k/M/G, Ki/Mi/Gi) into a float.
func quantity(s string) (float64, error) {
	suffixes := []struct {
		s string
		f float64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}}
	mult := 1.0
	for _, suf := range suffixes {
		if strings.HasSuffix(s, suf.s) {
			s, mult = strings.TrimSuffix(s, suf.s), suf.f
			break
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) {
		return 0, fmt.Errorf("not a positive quantity: %q", s)
	}
	return f * mult, nil
}

// intOf reads an int from a decoded YAML value.
func intOf(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case string:
		i, err := strconv.Atoi(n)
		return i, err == nil
	}
	return 0, false
}

// -------------------------------------------------------- YAML and files

// TestYAMLParses decodes every YAML document under deploy/kustomize and
// checks that each manifest says what it is.
func TestYAMLParses(t *testing.T) {
	n := 0
	err := filepath.WalkDir("kustomize", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		docs, err := decodeAll(data)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		if len(docs) == 0 && filepath.Base(path) != "tenaz.yaml" {
			t.Errorf("%s: no YAML document", path)
		}
		for i, doc := range docs {
			n++
			if filepath.Base(path) == "tenaz.yaml" {
				continue // the service config, not a manifest (TestSampleConfig)
			}
			if str(doc, "apiVersion") == "" || str(doc, "kind") == "" {
				t.Errorf("%s: document %d has no apiVersion or kind", path, i+1)
			}
			if k := str(doc, "kind"); k != "Kustomization" && k != "Component" && str(doc, "metadata", "name") == "" {
				t.Errorf("%s: document %d (%s) has no metadata.name", path, i+1, str(doc, "kind"))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no YAML documents under kustomize/")
	}
}

// TestKustomizationReferences checks that every file or directory a
// kustomization.yaml names exists, and that every manifest file beside one
// is listed (a forgotten resource is silently not deployed).
func TestKustomizationReferences(t *testing.T) {
	var dirs []string
	_ = filepath.WalkDir("kustomize", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			dirs = append(dirs, filepath.Dir(path))
		}
		return err
	})
	for _, want := range []string{"kustomize/base", "kustomize/overlays/example", "kustomize/components/keda"} {
		if !slices.Contains(dirs, want) {
			t.Errorf("%s/kustomization.yaml is missing", want)
		}
	}
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var k obj
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		used := map[string]bool{"kustomization.yaml": true}
		for _, r := range list(k, "resources") {
			ref, _ := r.(string)
			p := filepath.Join(dir, ref)
			fi, err := os.Stat(p)
			switch {
			case err != nil:
				t.Errorf("%s/kustomization.yaml: resource %q: %v", dir, ref, err)
			case fi.IsDir():
				if _, err := os.Stat(filepath.Join(p, "kustomization.yaml")); err != nil {
					t.Errorf("%s/kustomization.yaml: resource %q is a directory without kustomization.yaml", dir, ref)
				}
			}
			used[filepath.Clean(ref)] = true
		}
		for _, c := range list(k, "components") {
			ref, _ := c.(string)
			data, err := os.ReadFile(filepath.Join(dir, ref, "kustomization.yaml"))
			if err != nil {
				t.Errorf("%s/kustomization.yaml: component %q: %v", dir, ref, err)
				continue
			}
			var ck obj
			if err := yaml.Unmarshal(data, &ck); err != nil || str(ck, "kind") != "Component" {
				t.Errorf("%s/kustomization.yaml: component %q is not a kind: Component kustomization (%v)", dir, ref, err)
			}
		}
		for _, g := range list(k, "configMapGenerator") {
			for _, f := range list(g, "files") {
				ref, _ := f.(string)
				if i := strings.Index(ref, "="); i >= 0 { // key=path
					ref = ref[i+1:]
				}
				if _, err := os.Stat(filepath.Join(dir, ref)); err != nil {
					t.Errorf("%s/kustomization.yaml: configMapGenerator %s: file %q: %v", dir, str(g, "name"), ref, err)
				}
				used[filepath.Clean(ref)] = true
			}
		}
		for _, p := range list(k, "patches") {
			if ref := str(p, "path"); ref != "" {
				if _, err := os.Stat(filepath.Join(dir, ref)); err != nil {
					t.Errorf("%s/kustomization.yaml: patch %q: %v", dir, ref, err)
				}
				used[filepath.Clean(ref)] = true
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") && !used[e.Name()] {
				t.Errorf("%s/%s is not referenced by %s/kustomization.yaml", dir, e.Name(), dir)
			}
		}
	}
}

// ------------------------------------------------------------ manifests

// TestManifests renders the base and the example overlay and checks every
// service's Deployment, PodDisruptionBudget and Service.
func TestManifests(t *testing.T) {
	for _, dir := range []string{"kustomize/base", "kustomize/overlays/example"} {
		t.Run(dir, func(t *testing.T) {
			r := rendered{render(t, dir)}
			for _, svc := range services {
				t.Run(svc, func(t *testing.T) { checkService(t, r, svc) })
			}
			// Nothing that deploys pods beyond the four services.
			for _, d := range r.docs {
				switch str(d, "kind") {
				case "Deployment", "PodDisruptionBudget", "Service", "ConfigMap", "ServiceMonitor", "PrometheusRule":
				case "ScaledObject":
					if dir == "kustomize/base" {
						t.Errorf("ScaledObject %s in the base: KEDA objects belong in components/keda", str(d, "metadata", "name"))
					}
				default:
					t.Errorf("unexpected %s %s", str(d, "kind"), str(d, "metadata", "name"))
				}
			}
			if got := len(r.all("Deployment")); got != len(services) {
				t.Errorf("%d Deployments, want %d", got, len(services))
			}
		})
	}
}

// TestExampleOverlay checks what the example overlay sets.
func TestExampleOverlay(t *testing.T) {
	r := rendered{render(t, "kustomize/overlays/example")}
	// dispatcher and poller: no count, KEDA decides (TestKEDA).
	wantReplicas := map[string]int{"ingest": 2, "deadletter": 1}
	tag := ""
	for _, svc := range services {
		d := r.find("Deployment", "tenaz-"+svc)
		if d == nil {
			t.Fatalf("no Deployment tenaz-%s", svc)
		}
		if slices.Contains(scaled, svc) {
			if r := get(d, "spec", "replicas"); r != nil {
				t.Errorf("tenaz-%s: replicas %v: KEDA owns this count; a count in the manifest would undo its scaling at every apply", svc, r)
			}
		} else if n, _ := intOf(get(d, "spec", "replicas")); n != wantReplicas[svc] {
			t.Errorf("tenaz-%s: replicas %v, want %d", svc, get(d, "spec", "replicas"), wantReplicas[svc])
		}
		image := str(d, "spec", "template", "spec", "containers", 0, "image")
		name, tg, ok := strings.Cut(image, ":")
		if !ok || name != "tenaz/"+svc || tg == "" || tg == "latest" {
			t.Errorf("tenaz-%s: image %q, want tenaz/%s:<pinned tag>", svc, image, svc)
		}
		if tag == "" {
			tag = tg
		} else if tg != tag {
			t.Errorf("tenaz-%s: image tag %q differs from the others' %q", svc, tg, tag)
		}
	}
}

func checkService(t *testing.T, r rendered, svc string) {
	name := "tenaz-" + svc
	d := r.find("Deployment", name)
	if d == nil {
		t.Fatalf("no Deployment %s", name)
	}
	if got := str(d, "apiVersion"); got != "apps/v1" {
		t.Errorf("apiVersion %q, want apps/v1", got)
	}
	pod := get(d, "spec", "template", "spec")
	podLabels := labels(d, "spec", "template", "metadata", "labels")
	sel := labels(d, "spec", "selector", "matchLabels")
	if !selects(sel, podLabels) {
		t.Errorf("selector %v does not match the pod labels %v", sel, podLabels)
	}
	// Every other service's pods: no selector of this service may match them.
	var others []map[string]string
	for _, o := range r.all("Deployment") {
		if str(o, "metadata", "name") != name {
			others = append(others, labels(o, "spec", "template", "metadata", "labels"))
		}
	}
	for _, o := range others {
		if selects(sel, o) {
			t.Errorf("selector %v also matches pods %v", sel, o)
		}
	}

	// Pod level.
	if n, ok := intOf(get(pod, "terminationGracePeriodSeconds")); !ok || n != gracePeriod {
		t.Errorf("terminationGracePeriodSeconds %v, want %d", get(pod, "terminationGracePeriodSeconds"), gracePeriod)
	}
	if get(pod, "enableServiceLinks") != false {
		t.Error("enableServiceLinks must be false (service-link variables must not reach the TENAZ_* overrides)")
	}
	if get(pod, "automountServiceAccountToken") != false {
		t.Error("automountServiceAccountToken must be false (the services do not call the API server)")
	}

	containers := list(pod, "containers")
	if len(containers) != 1 {
		t.Fatalf("%d containers, want 1", len(containers))
	}
	c := containers[0]
	if image := str(c, "image"); image != "tenaz/"+svc && !strings.HasPrefix(image, "tenaz/"+svc+":") {
		t.Errorf("image %q, want tenaz/%s", image, svc)
	}

	// Port and probes.
	portNames := map[string]int{}
	for _, p := range list(c, "ports") {
		n, _ := intOf(get(p, "containerPort"))
		portNames[str(p, "name")] = n
	}
	if portNames["http"] != port {
		t.Errorf("container port http = %d, want %d", portNames["http"], port)
	}
	probePort := func(probe string) int {
		v := get(c, probe, "httpGet", "port")
		if n, ok := v.(int); ok {
			return n
		}
		s, _ := v.(string)
		return portNames[s]
	}
	for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		if got := str(c, probe, "httpGet", "path"); got != path {
			t.Errorf("%s path %q, want %s", probe, got, path)
		}
		if got := probePort(probe); got != port {
			t.Errorf("%s port %d, want %d", probe, got, port)
		}
	}
	if get(c, "startupProbe") != nil && probePort("startupProbe") != port {
		t.Errorf("startupProbe port %d, want %d", probePort("startupProbe"), port)
	}

	// SIGTERM comes after the preStop hook; the drain must fit in what is left.
	if s, ok := intOf(get(c, "lifecycle", "preStop", "sleep", "seconds")); ok && s+drain >= gracePeriod {
		t.Errorf("preStop sleep %ds + %ds drain does not fit in the %ds grace period", s, drain, gracePeriod)
	}

	// Resources.
	for _, kind := range []string{"requests", "limits"} {
		for _, res := range []string{"cpu", "memory"} {
			if _, err := quantity(fmt.Sprint(get(c, "resources", kind, res))); err != nil {
				t.Errorf("resources.%s.%s: %v", kind, res, err)
			}
		}
	}
	for _, res := range []string{"cpu", "memory"} {
		req, err1 := quantity(fmt.Sprint(get(c, "resources", "requests", res)))
		lim, err2 := quantity(fmt.Sprint(get(c, "resources", "limits", res)))
		if err1 == nil && err2 == nil && req > lim {
			t.Errorf("resources: %s request above its limit", res)
		}
	}

	// Security context: the container's value, else the pod's.
	eff := func(path ...any) any {
		if v := get(c, append([]any{"securityContext"}, path...)...); v != nil {
			return v
		}
		return get(pod, append([]any{"securityContext"}, path...)...)
	}
	for _, f := range []struct {
		path []any
		want any
	}{
		{[]any{"runAsNonRoot"}, true},
		{[]any{"readOnlyRootFilesystem"}, true},
		{[]any{"allowPrivilegeEscalation"}, false},
		{[]any{"seccompProfile", "type"}, "RuntimeDefault"},
	} {
		if got := eff(f.path...); got != f.want {
			t.Errorf("securityContext.%v = %v, want %v", f.path, got, f.want)
		}
	}
	if drop := list(c, "securityContext", "capabilities", "drop"); !slices.Contains(drop, any("ALL")) {
		t.Errorf("securityContext.capabilities.drop = %v, want [ALL]", drop)
	}
	if add := list(c, "securityContext", "capabilities", "add"); len(add) > 0 {
		t.Errorf("securityContext.capabilities.add = %v, want none", add)
	}
	if uid, ok := intOf(eff("runAsUser")); ok && uid == 0 {
		t.Error("runAsUser 0")
	}

	// Environment: TENAZ_CONFIG, and NATS_URL from a ConfigMap or Secret.
	env := map[string]any{}
	for _, e := range list(c, "env") {
		env[str(e, "name")] = e
	}
	if got := str(env["TENAZ_CONFIG"], "value"); got != configPath {
		t.Errorf("TENAZ_CONFIG = %q, want %s", got, configPath)
	}
	switch {
	case get(env["NATS_URL"], "valueFrom", "configMapKeyRef") != nil:
		ref := get(env["NATS_URL"], "valueFrom", "configMapKeyRef")
		cm := r.find("ConfigMap", str(ref, "name"))
		if cm == nil {
			t.Errorf("NATS_URL: ConfigMap %q is not in the manifests", str(ref, "name"))
		} else if u := str(cm, "data", str(ref, "key")); !strings.HasPrefix(u, "nats://") && !strings.HasPrefix(u, "tls://") {
			t.Errorf("NATS_URL: ConfigMap %s key %s = %q, want a nats:// URL", str(ref, "name"), str(ref, "key"), u)
		}
	case get(env["NATS_URL"], "valueFrom", "secretKeyRef") != nil:
		if str(env["NATS_URL"], "valueFrom", "secretKeyRef", "name") == "" {
			t.Error("NATS_URL: secretKeyRef without a name")
		}
	default:
		t.Error("NATS_URL must come from a configMapKeyRef or secretKeyRef")
	}

	// The config file: mounted at /etc/tenaz from the tenaz-config ConfigMap.
	cfgMap := r.configMap("tenaz-config")
	if cfgMap == nil {
		t.Fatal("no ConfigMap tenaz-config")
	}
	mounted := false
	for _, m := range list(c, "volumeMounts") {
		if str(m, "mountPath") != filepath.Dir(configPath) {
			continue
		}
		for _, v := range list(pod, "volumes") {
			if str(v, "name") == str(m, "name") && str(v, "configMap", "name") == str(cfgMap, "metadata", "name") {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("ConfigMap %s is not mounted at %s", str(cfgMap, "metadata", "name"), filepath.Dir(configPath))
	}

	// Exactly one PodDisruptionBudget, minAvailable 1, selecting these pods only.
	var pdbs []obj
	for _, p := range r.all("PodDisruptionBudget") {
		if selects(labels(p, "spec", "selector", "matchLabels"), podLabels) {
			pdbs = append(pdbs, p)
		}
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets select the pods, want 1", len(pdbs))
	}
	p := pdbs[0]
	if got := str(p, "apiVersion"); got != "policy/v1" {
		t.Errorf("PodDisruptionBudget apiVersion %q, want policy/v1", got)
	}
	if n, ok := intOf(get(p, "spec", "minAvailable")); !ok || n != 1 {
		t.Errorf("PodDisruptionBudget minAvailable %v, want 1", get(p, "spec", "minAvailable"))
	}
	for _, o := range others {
		if selects(labels(p, "spec", "selector", "matchLabels"), o) {
			t.Errorf("PodDisruptionBudget %s also selects pods %v", str(p, "metadata", "name"), o)
		}
	}

	// A Service for the services that have one, to port http.
	s := r.find("Service", name)
	if !slices.Contains(withService, svc) {
		if s != nil {
			t.Errorf("unexpected Service %s", name)
		}
		return
	}
	if s == nil {
		t.Fatalf("no Service %s", name)
	}
	if !selects(labels(s, "spec", "selector"), podLabels) {
		t.Errorf("Service selector %v does not match the pods %v", labels(s, "spec", "selector"), podLabels)
	}
	for _, o := range others {
		if selects(labels(s, "spec", "selector"), o) {
			t.Errorf("Service selector also matches pods %v", o)
		}
	}
	ports := list(s, "spec", "ports")
	if len(ports) != 1 {
		t.Fatalf("Service has %d ports, want 1", len(ports))
	}
	sp, _ := intOf(get(ports[0], "port"))
	tp := get(ports[0], "targetPort")
	if name, ok := tp.(string); ok {
		tp = portNames[name]
	}
	if sp != port || tp != port {
		t.Errorf("Service port %v -> %v, want %d -> %d", get(ports[0], "port"), get(ports[0], "targetPort"), port, port)
	}
}

// --------------------------------------------------------- sample config

// podEnv returns the environment a container of d gets from its env list:
// literal values and ConfigMap keys resolved from r, Secret keys as a
// placeholder (they are not in the manifests).
func podEnv(t *testing.T, r rendered, d obj) func(string) (string, bool) {
	env := map[string]string{}
	for _, e := range list(d, "spec", "template", "spec", "containers", 0, "env") {
		name := str(e, "name")
		switch {
		case get(e, "valueFrom", "configMapKeyRef") != nil:
			ref := get(e, "valueFrom", "configMapKeyRef")
			cm := r.find("ConfigMap", str(ref, "name"))
			v, ok := get(cm, "data", str(ref, "key")).(string)
			if !ok {
				t.Errorf("%s: env %s: no key %s in ConfigMap %s", str(d, "metadata", "name"), name, str(ref, "key"), str(ref, "name"))
			}
			env[name] = v
		case get(e, "valueFrom", "secretKeyRef") != nil:
			env[name] = "from-a-secret"
			if strings.HasSuffix(str(e, "valueFrom", "secretKeyRef", "key"), "-hash") {
				sum := sha256.Sum256([]byte(name)) // the shape of a key's hash, different per key
				env[name] = "sha256:" + hex.EncodeToString(sum[:])
			}
		case get(e, "valueFrom", "resourceFieldRef") != nil:
			env[name] = "536870912"
		default:
			env[name] = str(e, "value")
		}
	}
	// envFrom may only bring optional TENAZ_* overrides (NATS credentials):
	// whatever tenaz.yaml references must be listed under env, or a pod
	// could start without it.
	for _, ef := range list(d, "spec", "template", "spec", "containers", 0, "envFrom") {
		if get(ef, "secretRef", "optional") != true || get(ef, "configMapRef") != nil || str(ef, "prefix") != "" {
			t.Errorf("%s: envFrom %v: only optional secretRefs (TENAZ_* overrides) are expected; list what tenaz.yaml needs under env", str(d, "metadata", "name"), ef)
		}
	}
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

// TestSampleConfig checks the tenaz.yaml of the ConfigMap with config.Parse
// in each Deployment's environment (so a ${ENV} reference needs a variable
// in every Deployment).
func TestSampleConfig(t *testing.T) {
	r := rendered{render(t, "kustomize/overlays/example")}
	cm := r.configMap("tenaz-config")
	if cm == nil {
		t.Fatal("no ConfigMap tenaz-config")
	}
	data, ok := get(cm, "data", filepath.Base(configPath)).(string)
	if !ok || strings.TrimSpace(data) == "" {
		t.Fatalf("ConfigMap %s has no %s", str(cm, "metadata", "name"), filepath.Base(configPath))
	}
	check := func(what string, getenv func(string) (string, bool)) {
		cfg, err := config.Parse([]byte(data), getenv)
		if err != nil {
			t.Errorf("%s: tenaz.yaml is not a valid config:\n%v", what, err)
			return
		}
		// Empty means an embedded server, which only `tenaz run` has.
		if cfg.NATS.URL == "" {
			t.Errorf("%s: nats.url is empty", what)
		}
		if cfg.Demo.Provider != "" {
			t.Errorf("%s: demo.provider is set; the demo provider is for `tenaz run` only", what)
		}
		if _, p, err := net.SplitHostPort(cfg.HTTP.Addr); err != nil || p != strconv.Itoa(port) {
			t.Errorf("%s: http.addr %q does not listen on %d, the port of the probes", what, cfg.HTTP.Addr, port)
		}
		if len(cfg.Kinds) == 0 || len(cfg.Targets) == 0 {
			t.Errorf("%s: no kinds or targets: every event would be refused", what)
		}
		if got := int(cfg.StopTimeout.D() / time.Second); got > drain {
			t.Errorf("%s: stop_timeout %ds is longer than the %ds drain the grace periods are checked against", what, got, drain)
		}
	}
	// The file itself names the NATS servers (NATS_URL only overrides them).
	var raw struct {
		NATS struct {
			URL string `yaml:"url"`
		} `yaml:"nats"`
	}
	if err := yaml.Unmarshal([]byte(data), &raw); err != nil {
		t.Fatalf("tenaz.yaml: %v", err)
	}
	if raw.NATS.URL == "" {
		t.Error("tenaz.yaml: nats.url is empty; in a Deployment it must name the NATS servers (empty means an embedded server)")
	}
	for _, svc := range services {
		d := r.find("Deployment", "tenaz-"+svc)
		if d == nil {
			t.Fatalf("no Deployment tenaz-%s", svc)
		}
		check("environment of tenaz-"+svc, podEnv(t, r, d))
	}
}

// ------------------------------------------------------------ Dockerfile

// dockerfile is the parsed deploy/docker/Dockerfile: instructions with
// continuation lines joined, split into stages.
type instr struct{ op, args string }

func parseDockerfile(t *testing.T) [][]instr {
	t.Helper()
	data, err := os.ReadFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var stages [][]instr
	var global []instr
	cur := ""
	flush := func() {
		line := strings.TrimSpace(cur)
		cur = ""
		if line == "" {
			return
		}
		op, args, _ := strings.Cut(line, " ")
		in := instr{strings.ToUpper(op), strings.TrimSpace(args)}
		if in.op == "FROM" {
			stages = append(stages, nil)
		}
		if len(stages) == 0 {
			global = append(global, in)
			return
		}
		stages[len(stages)-1] = append(stages[len(stages)-1], in)
	}
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cur += trimmed
		flush()
	}
	flush()
	if !slices.Contains(global, instr{"ARG", "SERVICE"}) && !slices.ContainsFunc(global, func(i instr) bool { return i.op == "ARG" && strings.HasPrefix(i.args, "SERVICE=") }) {
		t.Error("Dockerfile: no global ARG SERVICE before the first FROM")
	}
	return stages
}

func find(stage []instr, op string) []string {
	var out []string
	for _, in := range stage {
		if in.op == op {
			out = append(out, in.args)
		}
	}
	return out
}

// TestDockerfile checks the stages of the Dockerfile and runs its build step
// for every SERVICE with a stand-in `go` that records what would be built.
func TestDockerfile(t *testing.T) {
	stages := parseDockerfile(t)
	if len(stages) != 2 {
		t.Fatalf("Dockerfile has %d stages, want 2 (build, final)", len(stages))
	}
	build, final := stages[0], stages[1]

	if from := find(build, "FROM"); len(from) != 1 || !strings.HasPrefix(from[0], "golang:1.26 ") {
		t.Errorf("build stage FROM %v, want golang:1.26 AS <name>", from)
	}
	if from := find(final, "FROM"); len(from) != 1 || from[0] != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("final stage FROM %v, want gcr.io/distroless/static-debian12:nonroot", from)
	}
	// Numeric, so that Kubernetes' runAsNonRoot can verify it.
	if user := find(final, "USER"); len(user) != 1 || user[0] != fmt.Sprintf("%d:%d", nonrootUID, nonrootUID) {
		t.Errorf("final stage USER %v, want %d:%d (distroless nonroot)", user, nonrootUID, nonrootUID)
	}
	if expose := find(final, "EXPOSE"); !slices.Contains(expose, strconv.Itoa(port)) {
		t.Errorf("final stage EXPOSE %v, want %d", expose, port)
	}
	if ep := find(final, "ENTRYPOINT"); len(ep) != 1 || ep[0] != `["/app"]` {
		t.Errorf("final stage ENTRYPOINT %v, want [\"/app\"]", ep)
	}
	buildName := strings.Fields(find(build, "FROM")[0])
	if copies := find(final, "COPY"); len(copies) != 1 || copies[0] != "--from="+buildName[len(buildName)-1]+" /out/app /app" {
		t.Errorf("final stage COPY %v, want the one binary from the build stage", copies)
	}
	if cp := find(build, "COPY"); !slices.Contains(cp, ". .") {
		t.Errorf("build stage COPY %v, want the whole repository (. .): go.work and the replace directives need it", cp)
	}
	runs := find(build, "RUN")
	if len(runs) != 1 {
		t.Fatalf("build stage has %d RUN, want 1", len(runs))
	}

	// The RUN's shell command, without its --mount flags.
	script := runs[0]
	for strings.HasPrefix(script, "--") {
		_, script, _ = strings.Cut(script, " ")
		script = strings.TrimSpace(script)
	}

	// A stand-in go that prints its arguments and environment.
	bin := t.TempDir()
	fake := "#!/bin/sh\necho \"CGO_ENABLED=$CGO_ENABLED\"\nfor a in \"$@\"; do echo \"ARG $a\"; done\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	runScript := func(service string) (string, error) {
		cmd := exec.Command("/bin/sh", "-ec", script)
		cmd.Dir = repo
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "SERVICE=" + service}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	want := map[string]string{
		"ingest":     "tenaz-ingest",
		"dispatcher": "tenaz-dispatcher",
		"poller":     "tenaz-poller",
		"deadletter": "tenaz-deadletter",
		"tenaz":      "tenaz",
	}
	for svc, binName := range want {
		out, err := runScript(svc)
		if err != nil {
			t.Errorf("SERVICE=%s: build step failed: %v\n%s", svc, err, out)
			continue
		}
		var args []string
		cgo := ""
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if a, ok := strings.CutPrefix(l, "ARG "); ok {
				args = append(args, a)
			} else if v, ok := strings.CutPrefix(l, "CGO_ENABLED="); ok {
				cgo = v
			}
		}
		if cgo != "0" {
			t.Errorf("SERVICE=%s: CGO_ENABLED=%q, want 0", svc, cgo)
		}
		if len(args) == 0 || args[0] != "build" {
			t.Errorf("SERVICE=%s: go %v, want go build", svc, args)
			continue
		}
		for _, flag := range []string{"-trimpath", "-ldflags=-s -w"} {
			if !slices.Contains(args, flag) {
				t.Errorf("SERVICE=%s: go %v lacks %s", svc, args, flag)
			}
		}
		if i := slices.Index(args, "-o"); i < 0 || i+1 >= len(args) || args[i+1] != "/out/app" {
			t.Errorf("SERVICE=%s: go %v does not write /out/app", svc, args)
		}
		pkg := args[len(args)-1]
		if wantPkg := "./services/" + svc + "/cmd/" + binName; pkg != wantPkg {
			t.Errorf("SERVICE=%s: builds %s, want %s", svc, pkg, wantPkg)
		}
		// The package exists and is a command.
		files, _ := filepath.Glob(filepath.Join(repo, pkg, "*.go"))
		isMain := false
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err == nil && regexp.MustCompile(`(?m)^package main$`).Match(src) {
				isMain = true
			}
		}
		if !isMain {
			t.Errorf("SERVICE=%s: %s is not a main package in the repository", svc, pkg)
		}
	}
	// Every service's own command (services/<svc>/cmd/tenaz-<svc>) has a
	// SERVICE that builds it; other commands (tenaz-bench, tenaz-chaos) are
	// tools, not images.
	dirs, _ := filepath.Glob(filepath.Join(repo, "services", "*", "cmd", "*"))
	for _, d := range dirs {
		svc := filepath.Base(filepath.Dir(filepath.Dir(d)))
		b := filepath.Base(d)
		if b != "tenaz-"+svc && !(svc == "tenaz" && b == "tenaz") {
			continue
		}
		if !slices.Contains(slices.Collect(maps.Values(want)), b) {
			t.Errorf("%s has no SERVICE in the Dockerfile", d)
		}
	}
	for _, svc := range services {
		if _, err := os.Stat(filepath.Join(repo, "services", svc, "cmd", "tenaz-"+svc)); err != nil {
			t.Errorf("services/%s/cmd/tenaz-%s: %v", svc, svc, err)
		}
	}
	if out, err := runScript("nope"); err == nil {
		t.Errorf("SERVICE=nope: the build step succeeded; it must refuse an unknown service\n%s", out)
	}
}

// TestDockerignore checks that the build context leaves out what must not
// be in it.
func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	for _, want := range [][]string{{".git", ".git/"}, {"bin", "bin/", "/bin/"}, {".tenaz", ".tenaz/"}} {
		if !slices.ContainsFunc(lines, func(l string) bool { return slices.Contains(want, strings.TrimSpace(l)) }) {
			t.Errorf(".dockerignore does not exclude %s", want[0])
		}
	}
}
