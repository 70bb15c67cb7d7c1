package deploy

// Every rendered object decoded strictly (unknown fields are errors) into
// the real Kubernetes API types (k8s.io/api), the Prometheus Operator's
// types for ServiceMonitor and PrometheusRule, and, for KEDA's
// ScaledObject, local structs mirroring the fields of keda.sh/v1alpha1 we
// use (KEDA's own module is an operator with hundreds of dependencies).
// Then typed checks: security context, probes, grace period against the
// drain, PodDisruptionBudgets, the ServiceMonitor, the KEDA objects and
// the NATS Helm values, all without a cluster or helm.

import (
	"bytes"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8slabels "k8s.io/apimachinery/pkg/labels"

	"github.com/tenaz/tenaz/pkg/auth"
	"github.com/tenaz/tenaz/pkg/config"
	"github.com/tenaz/tenaz/pkg/names"
	"github.com/tenaz/tenaz/streams"
)

// ------------------------------------------------------------ KEDA types

// scaledObject mirrors the fields of KEDA's keda.sh/v1alpha1 ScaledObject
// that these manifests use (github.com/kedacore/keda/v2/apis/keda/v1alpha1,
// ScaledObjectSpec); decoding is strict, so a misspelt or unsupported field
// fails.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			APIVersion string `json:"apiVersion,omitempty"`
			Kind       string `json:"kind,omitempty"`
			Name       string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval *int32 `json:"pollingInterval,omitempty"`
		CooldownPeriod  *int32 `json:"cooldownPeriod,omitempty"`
		MinReplicaCount *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount *int32 `json:"maxReplicaCount,omitempty"`
		Fallback        *struct {
			FailureThreshold int32 `json:"failureThreshold"`
			Replicas         int32 `json:"replicas"`
		} `json:"fallback,omitempty"`
		Advanced *struct {
			HorizontalPodAutoscalerConfig *struct {
				Behavior *struct {
					ScaleUp   *hpaRules `json:"scaleUp,omitempty"`
					ScaleDown *hpaRules `json:"scaleDown,omitempty"`
				} `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type       string            `json:"type"`
			Name       string            `json:"name,omitempty"`
			MetricType string            `json:"metricType,omitempty"`
			Metadata   map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// hpaRules mirrors autoscaling/v2 HPAScalingRules.
type hpaRules struct {
	StabilizationWindowSeconds *int32 `json:"stabilizationWindowSeconds,omitempty"`
	SelectPolicy               string `json:"selectPolicy,omitempty"`
	Policies                   []struct {
		Type          string `json:"type"`
		Value         int32  `json:"value"`
		PeriodSeconds int32  `json:"periodSeconds"`
	} `json:"policies,omitempty"`
}

// The metadata each KEDA trigger type accepts (keda.sh/docs/2.x/scalers):
// a key outside these is a typo KEDA would ignore or refuse.
var kedaTriggerKeys = map[string][]string{
	"prometheus": {"serverAddress", "query", "threshold", "activationThreshold", "namespace",
		"customHeaders", "ignoreNullValues", "queryParameters", "unsafeSsl", "timeout"},
	"nats-jetstream": {"natsServerMonitoringEndpoint", "account", "stream", "consumer",
		"lagThreshold", "activationLagThreshold", "useHttps"},
}

// ------------------------------------------------------- strict decoding

// objects is one render, decoded into typed objects.
type objects struct {
	deployments   map[string]*appsv1.Deployment
	services      map[string]*corev1.Service
	configMaps    map[string]*corev1.ConfigMap
	pdbs          map[string]*policyv1.PodDisruptionBudget
	monitors      map[string]*monitoringv1.ServiceMonitor
	rules         map[string]*monitoringv1.PrometheusRule
	scaledObjects map[string]*scaledObject
}

// strict decodes v (a decoded YAML document) into out through JSON,
// refusing unknown fields.
func strict(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}

func decodeTyped(t *testing.T, dir string) objects {
	t.Helper()
	o := objects{
		deployments: map[string]*appsv1.Deployment{}, services: map[string]*corev1.Service{},
		configMaps: map[string]*corev1.ConfigMap{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		monitors: map[string]*monitoringv1.ServiceMonitor{}, rules: map[string]*monitoringv1.PrometheusRule{},
		scaledObjects: map[string]*scaledObject{},
	}
	for _, d := range render(t, dir) {
		gvk := str(d, "apiVersion") + " " + str(d, "kind")
		name := str(d, "metadata", "name")
		var target any
		switch gvk {
		case "apps/v1 Deployment":
			x := &appsv1.Deployment{}
			o.deployments[name], target = x, x
		case "v1 Service":
			x := &corev1.Service{}
			o.services[name], target = x, x
		case "v1 ConfigMap":
			x := &corev1.ConfigMap{}
			o.configMaps[name], target = x, x
		case "policy/v1 PodDisruptionBudget":
			x := &policyv1.PodDisruptionBudget{}
			o.pdbs[name], target = x, x
		case "monitoring.coreos.com/v1 ServiceMonitor":
			x := &monitoringv1.ServiceMonitor{}
			o.monitors[name], target = x, x
		case "monitoring.coreos.com/v1 PrometheusRule":
			x := &monitoringv1.PrometheusRule{}
			o.rules[name], target = x, x
		case "keda.sh/v1alpha1 ScaledObject":
			x := &scaledObject{}
			o.scaledObjects[name], target = x, x
		default:
			t.Errorf("%s: %s %s: no API type known to this test", dir, gvk, name)
			continue
		}
		if err := strict(d, target); err != nil {
			t.Errorf("%s: %s %s does not decode strictly into its API type: %v", dir, gvk, name, err)
		}
	}
	return o
}

// TestStrictDecoding: the base and the example overlay decode strictly, and
// the typed objects pass the checks below.
func TestStrictDecoding(t *testing.T) {
	for _, dir := range []string{"kustomize/base", "kustomize/overlays/example"} {
		t.Run(dir, func(t *testing.T) {
			o := decodeTyped(t, dir)
			if len(o.deployments) != len(services) {
				t.Fatalf("%d Deployments, want %d", len(o.deployments), len(services))
			}
			for _, svc := range services {
				t.Run(svc, func(t *testing.T) { checkTypedService(t, o, svc) })
			}
			checkServiceMonitor(t, o)
			if len(o.rules) != 1 {
				t.Errorf("%d PrometheusRules, want 1", len(o.rules))
			}
			for _, pr := range o.rules {
				n := 0
				for _, g := range pr.Spec.Groups {
					n += len(g.Rules)
				}
				if want := len(alerts(loadRules(t))); n != want {
					t.Errorf("PrometheusRule %s: %d rules, want %d", pr.Name, n, want)
				}
			}
		})
	}
}

func checkTypedService(t *testing.T, o objects, svc string) {
	name := "tenaz-" + svc
	d := o.deployments[name]
	if d == nil {
		t.Fatalf("no Deployment %s", name)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]

	// Grace period: longer than the preStop pause plus the drain.
	if pod.TerminationGracePeriodSeconds == nil {
		t.Fatal("no terminationGracePeriodSeconds (the default, 30, should be explicit)")
	}
	pause := int64(0)
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		pause = c.Lifecycle.PreStop.Sleep.Seconds
	}
	if g := *pod.TerminationGracePeriodSeconds; g <= pause+int64(drain) {
		t.Errorf("terminationGracePeriodSeconds %d is not longer than the preStop %ds + the %ds drain (stop_timeout)", g, pause, drain)
	}

	// Security context, pod and container.
	psc, csc := pod.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil {
		t.Fatal("no pod or container securityContext")
	}
	boolIs := func(p *bool, want bool) bool { return p != nil && *p == want }
	if !boolIs(psc.RunAsNonRoot, true) || !boolIs(csc.RunAsNonRoot, true) {
		t.Error("runAsNonRoot must be true on the pod and the container")
	}
	if psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Error("runAsUser must be a non-zero uid (runAsNonRoot cannot check the image's user name)")
	}
	if !boolIs(csc.ReadOnlyRootFilesystem, true) {
		t.Error("readOnlyRootFilesystem must be true")
	}
	if !boolIs(csc.AllowPrivilegeEscalation, false) {
		t.Error("allowPrivilegeEscalation must be false")
	}
	if csc.Privileged != nil && *csc.Privileged {
		t.Error("privileged")
	}
	if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, corev1.Capability("ALL")) || len(csc.Capabilities.Add) > 0 {
		t.Errorf("capabilities %+v, want drop [ALL] and nothing added", csc.Capabilities)
	}
	if csc.SeccompProfile == nil || csc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("seccompProfile must be RuntimeDefault")
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("automountServiceAccountToken must be false")
	}

	// Probes: liveness /healthz, readiness /readyz, on the http port.
	probe := func(what string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet probe on %s", what, path)
			return
		}
		if p.HTTPGet.Path != path {
			t.Errorf("%s: path %q, want %s", what, p.HTTPGet.Path, path)
		}
		if p.HTTPGet.Port.IntValue() != port && p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s: port %s, want %d", what, p.HTTPGet.Port.String(), port)
		}
	}
	probe("livenessProbe", c.LivenessProbe, "/healthz")
	probe("readinessProbe", c.ReadinessProbe, "/readyz")
	if c.StartupProbe != nil {
		probe("startupProbe", c.StartupProbe, "/healthz")
	}

	// Resources: requests and limits for cpu and memory, requests <= limits.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okr := c.Resources.Requests[r]
		lim, okl := c.Resources.Limits[r]
		if !okr || !okl {
			t.Errorf("resources: want a request and a limit of %s", r)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("resources: %s request %s over its limit %s", r, req.String(), lim.String())
		}
	}

	// Credentials come from Secrets, never literal values.
	for _, e := range c.Env {
		if strings.Contains(strings.ToLower(e.Name), "password") || strings.Contains(strings.ToLower(e.Name), "token") || strings.HasSuffix(e.Name, "_HASH") {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				t.Errorf("env %s: a credential must come from a secretKeyRef", e.Name)
			}
		}
	}
	for _, ef := range c.EnvFrom {
		if ef.SecretRef == nil {
			t.Errorf("envFrom %+v: want a secretRef", ef)
		}
	}

	// PodDisruptionBudget: exactly one selects the pods.
	podLabels := k8slabels.Set(d.Spec.Template.Labels)
	var pdbs []*policyv1.PodDisruptionBudget
	for _, p := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		if err != nil {
			t.Errorf("PodDisruptionBudget %s: %v", p.Name, err)
			continue
		}
		if sel.Matches(podLabels) {
			pdbs = append(pdbs, p)
		}
	}
	if len(pdbs) != 1 {
		t.Fatalf("%d PodDisruptionBudgets select the pods, want 1", len(pdbs))
	}
	if pdbs[0].Spec.MinAvailable == nil && pdbs[0].Spec.MaxUnavailable == nil {
		t.Errorf("PodDisruptionBudget %s: neither minAvailable nor maxUnavailable", pdbs[0].Name)
	}

	// A Service selects the pods, port http.
	s := o.services[name]
	if s == nil {
		t.Fatalf("no Service %s", name)
	}
	if !k8slabels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
		t.Errorf("Service %s does not select the pods", name)
	}
	if len(s.Spec.Ports) != 1 || s.Spec.Ports[0].Name != "http" || s.Spec.Ports[0].Port != port {
		t.Errorf("Service %s ports %+v, want one named http on %d", name, s.Spec.Ports, port)
	}
}

// The ServiceMonitor scrapes /metrics on the http port of every tenaz
// Service.
func checkServiceMonitor(t *testing.T, o objects) {
	t.Helper()
	if len(o.monitors) != 1 {
		t.Fatalf("%d ServiceMonitors, want 1", len(o.monitors))
	}
	for _, sm := range o.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil || sel.Empty() {
			t.Fatalf("ServiceMonitor %s: selector %v (%v)", sm.Name, sm.Spec.Selector, err)
		}
		for _, svc := range services {
			s := o.services["tenaz-"+svc]
			if s == nil || !sel.Matches(k8slabels.Set(s.Labels)) {
				t.Errorf("ServiceMonitor %s does not select Service tenaz-%s", sm.Name, svc)
			}
		}
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "http" || sm.Spec.Endpoints[0].Path != "/metrics" {
			t.Errorf("ServiceMonitor %s endpoints %+v, want port http, path /metrics", sm.Name, sm.Spec.Endpoints)
		}
		if c := sm.Spec.ScrapeClassicHistograms; c == nil || !*c {
			t.Errorf("ServiceMonitor %s: want scrapeClassicHistograms: true, so that native histograms (metrics.native_histograms) keep the _bucket series the rules read", sm.Name)
		}
	}
	// The pods carry the scrape annotations too (a Prometheus without the
	// Operator).
	for name, d := range o.deployments {
		a := d.Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != strconv.Itoa(port) || a["prometheus.io/path"] != "/metrics" {
			t.Errorf("Deployment %s: pod annotations %v, want prometheus.io/scrape, port %d, path /metrics", name, a, port)
		}
	}
}

// ------------------------------------------------------------------ KEDA

// TestKEDA: the example overlay scales the dispatcher on the Prometheus
// backlog query and the poller on its consumer's lag, each ScaledObject
// pointing at a Deployment of the render that sets no replica count.
func TestKEDA(t *testing.T) {
	o := decodeTyped(t, "kustomize/overlays/example")
	ns := ""
	for _, d := range render(t, "kustomize/overlays/example") {
		if ns == "" {
			ns = str(d, "metadata", "namespace")
		}
	}
	want := map[string]string{"tenaz-dispatcher": "prometheus", "tenaz-poller": "nats-jetstream"}
	if len(o.scaledObjects) != len(want) {
		t.Errorf("%d ScaledObjects, want %d", len(o.scaledObjects), len(want))
	}
	for name, trigger := range want {
		so := o.scaledObjects[name]
		if so == nil {
			t.Errorf("no ScaledObject %s", name)
			continue
		}
		ref := so.Spec.ScaleTargetRef
		d := o.deployments[ref.Name]
		if d == nil || (ref.Kind != "" && ref.Kind != "Deployment") || (ref.APIVersion != "" && ref.APIVersion != "apps/v1") {
			t.Errorf("%s: scaleTargetRef %+v is not a Deployment of the render", name, ref)
			continue
		}
		if ref.Name != name {
			t.Errorf("%s scales %s, want the Deployment of the same name", name, ref.Name)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("%s: the Deployment sets replicas %d; KEDA's HPA owns the count", ref.Name, *d.Spec.Replicas)
		}
		if so.Spec.MinReplicaCount == nil || *so.Spec.MinReplicaCount < 2 {
			t.Errorf("%s: minReplicaCount %s, want at least 2 (the PodDisruptionBudget's minAvailable 1 then allows a drain)", name, deref(so.Spec.MinReplicaCount))
		}
		if so.Spec.MaxReplicaCount == nil || so.Spec.MinReplicaCount != nil && *so.Spec.MaxReplicaCount < *so.Spec.MinReplicaCount {
			t.Errorf("%s: maxReplicaCount %s, want one at least minReplicaCount", name, deref(so.Spec.MaxReplicaCount))
		}
		if so.Spec.Fallback == nil || so.Spec.Fallback.Replicas < 1 {
			t.Errorf("%s: want a fallback replica count for when the metric cannot be read", name)
		}
		// The poller's consumers are one per partition, a trigger each.
		want := map[string]int{"prometheus": 1, "nats-jetstream": streams.DefaultPartitions}[trigger]
		if len(so.Spec.Triggers) != want {
			t.Errorf("%s: %d triggers, want %d %s triggers", name, len(so.Spec.Triggers), want, trigger)
			continue
		}
		seen := map[string]bool{}
		for _, tr := range so.Spec.Triggers {
			if tr.Type != trigger {
				t.Errorf("%s: a %s trigger, want only %s", name, tr.Type, trigger)
				continue
			}
			for k := range tr.Metadata {
				if !slices.Contains(kedaTriggerKeys[tr.Type], k) {
					t.Errorf("%s: %s trigger metadata %q is not one KEDA knows (%v)", name, tr.Type, k, kedaTriggerKeys[tr.Type])
				}
			}
			switch tr.Type {
			case "prometheus":
				checkPrometheusTrigger(t, name, tr.Metadata)
			case "nats-jetstream":
				checkNATSTrigger(t, name, ns, tr.Metadata)
				seen[tr.Metadata["stream"]] = true
			}
		}
		if trigger == "nats-jetstream" {
			for p := range streams.DefaultPartitions {
				if !seen[streams.EventsStream("", p)] {
					t.Errorf("%s: no trigger reads partition %d's stream %s", name, p, streams.EventsStream("", p))
				}
			}
		}
	}
}

func deref(p *int32) string {
	if p == nil {
		return "unset"
	}
	return strconv.Itoa(int(*p))
}

func positiveInt(t *testing.T, what, v string) {
	t.Helper()
	if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
		t.Errorf("%s = %q, want a positive integer (KEDA parses it as one)", what, v)
	}
}

func checkPrometheusTrigger(t *testing.T, name string, md map[string]string) {
	if u, err := url.Parse(md["serverAddress"]); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		t.Errorf("%s: serverAddress %q is not an http(s) URL", name, md["serverAddress"])
	}
	if _, err := strconv.ParseFloat(md["threshold"], 64); err != nil {
		t.Errorf("%s: threshold %q is not a number", name, md["threshold"])
	}
	q := md["query"]
	for _, m := range []string{"tenaz_backlog_runnable_messages"} {
		if !strings.Contains(q, m) {
			t.Errorf("%s: the query does not use %s", name, m)
		}
	}
	checkNames(t, name+" query", q)
	checkSyntax(t, map[string]string{name + " query": q})
}

func checkNATSTrigger(t *testing.T, name, ns string, md map[string]string) {
	for _, k := range []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold"} {
		if md[k] == "" {
			t.Errorf("%s: nats-jetstream trigger without %s", name, k)
		}
	}
	positiveInt(t, name+" lagThreshold", md["lagThreshold"])
	if !slices.ContainsFunc([]int{0, 1, 2, 3}, func(p int) bool { return md["stream"] == streams.EventsStream("", p) }) {
		t.Errorf("%s: stream %q, want a partition's EVENTS stream", name, md["stream"])
	}
	// The consumer is one the services create (streams/data), bound to that
	// stream's subjects. (If KEDA does not find it, it reports the stream's
	// last sequence as the lag: maximum scale.)
	if md["consumer"] != names.ConsumerPoller {
		t.Errorf("%s: consumer %q, want the poller's %q", name, md["consumer"], names.ConsumerPoller)
	}
	filter := ""
	files, _ := filepath.Glob("../streams/data/consumer-*.json")
	for _, f := range files {
		var c struct {
			Durable string `json:"durable_name"`
			Filter  string `json:"filter_subject"`
		}
		b, err := os.ReadFile(f)
		if err == nil && json.Unmarshal(b, &c) == nil && c.Durable == md["consumer"] {
			filter = c.Filter
		}
	}
	if filter == "" {
		t.Errorf("%s: no streams/data/consumer-*.json defines the durable consumer %q", name, md["consumer"])
	}
	var st struct {
		Subjects []string `json:"subjects"`
	}
	if b, err := os.ReadFile("../streams/data/stream-events.json"); err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("streams/data/stream-events.json: %v", err)
	}
	if filter != "" && !slices.Contains(st.Subjects, filter) {
		t.Errorf("%s: consumer %q filters %q, which is not a subject of %s %v", name, md["consumer"], filter, names.StreamEvents, st.Subjects)
	}
	// The endpoint: the NATS chart's headless Service in the overlay's
	// namespace, monitoring port (KEDA prefixes server names to its host to
	// reach each node of a cluster).
	host, p, err := net.SplitHostPort(md["natsServerMonitoringEndpoint"])
	if err != nil {
		t.Fatalf("%s: natsServerMonitoringEndpoint %q: %v", name, md["natsServerMonitoringEndpoint"], err)
	}
	v := natsValues(t)
	if p != strconv.Itoa(v.Config.Monitor.Port) {
		t.Errorf("%s: monitoring port %s, want the chart's %d", name, p, v.Config.Monitor.Port)
	}
	if want := natsRelease + "-headless." + ns + ".svc.cluster.local"; host != want {
		t.Errorf("%s: endpoint host %q, want %q (the chart's headless Service in namespace %q)", name, host, want, ns)
	}
	if md["account"] != "$G" {
		t.Errorf("%s: account %q: the chart's values define no NATS accounts, so the streams are in $G", name, md["account"])
	}
}

// ------------------------------------------------------- NATS Helm values

// natsRelease is the Helm release name docs/deploy.md installs the chart
// as; it names the Services (nats, nats-headless).
const natsRelease = "nats"

// natsHelmValues mirrors the keys of the NATS chart (2.x) that
// deploy/nats/values.yaml sets; decoding is strict.
type natsHelmValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `yaml:"enabled"`
			Replicas int  `yaml:"replicas"`
		} `yaml:"cluster"`
		JetStream struct {
			Enabled     bool `yaml:"enabled"`
			MemoryStore struct {
				Enabled bool `yaml:"enabled"`
			} `yaml:"memoryStore"`
			FileStore struct {
				Enabled bool   `yaml:"enabled"`
				Dir     string `yaml:"dir"`
				MaxSize string `yaml:"maxSize"`
				PVC     struct {
					Enabled          bool   `yaml:"enabled"`
					Size             string `yaml:"size"`
					StorageClassName string `yaml:"storageClassName"`
				} `yaml:"pvc"`
			} `yaml:"fileStore"`
			Merge map[string]string `yaml:"merge"`
		} `yaml:"jetstream"`
		Monitor struct {
			Enabled bool `yaml:"enabled"`
			Port    int  `yaml:"port"`
		} `yaml:"monitor"`
		Merge struct {
			Authorization natsAuthorization `yaml:"authorization"`
		} `yaml:"merge"`
	} `yaml:"config"`
	Container struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
		Env   map[string]helmEnv `yaml:"env"`
		Merge struct {
			Resources corev1.ResourceRequirements `yaml:"-"`
			Raw       map[string]any              `yaml:"resources"`
		} `yaml:"merge"`
	} `yaml:"container"`
	PodTemplate struct {
		TopologySpreadConstraints map[string]struct {
			MaxSkew           int    `yaml:"maxSkew"`
			WhenUnsatisfiable string `yaml:"whenUnsatisfiable"`
		} `yaml:"topologySpreadConstraints"`
	} `yaml:"podTemplate"`
	PodDisruptionBudget struct {
		Enabled bool `yaml:"enabled"`
	} `yaml:"podDisruptionBudget"`
	PromExporter struct {
		Enabled    bool `yaml:"enabled"`
		PodMonitor struct {
			Enabled bool `yaml:"enabled"`
		} `yaml:"podMonitor"`
	} `yaml:"promExporter"`
	NatsBox struct {
		Enabled   bool `yaml:"enabled"`
		Container struct {
			Env map[string]helmEnv `yaml:"env"`
		} `yaml:"container"`
	} `yaml:"natsBox"`
}

func natsValues(t *testing.T) natsHelmValues {
	t.Helper()
	data, err := os.ReadFile("nats/values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var v natsHelmValues
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("nats/values.yaml: %v", err)
	}
	if err := strict(v.Container.Merge.Raw, &v.Container.Merge.Resources); err != nil {
		t.Fatalf("nats/values.yaml: container.merge.resources: %v", err)
	}
	return v
}

// TestNATSValues checks the chart values without helm: a 3-node cluster,
// JetStream on file storage on PVCs of a sane size, the sync choice, the
// monitoring port, spread and disruption budget — and that tenaz's config
// asks for as many stream replicas as there are servers.
func TestNATSValues(t *testing.T) {
	v := natsValues(t)
	c := v.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas != 3 {
		t.Errorf("cluster: enabled %v, replicas %d; want a 3-node cluster", c.Cluster.Enabled, c.Cluster.Replicas)
	}
	js := c.JetStream
	if !js.Enabled || !js.FileStore.Enabled || !js.FileStore.PVC.Enabled {
		t.Errorf("jetstream: enabled %v, fileStore %v, pvc %v; want JetStream on file storage on PVCs", js.Enabled, js.FileStore.Enabled, js.FileStore.PVC.Enabled)
	}
	if js.MemoryStore.Enabled {
		t.Error("jetstream.memoryStore is enabled: tenaz keeps nothing in memory storage")
	}
	size, err := resource.ParseQuantity(js.FileStore.PVC.Size)
	if err != nil || size.Cmp(resource.MustParse("10Gi")) < 0 {
		t.Errorf("fileStore.pvc.size %q: want a quantity of at least 10Gi (%v)", js.FileStore.PVC.Size, err)
	}
	maxSize, err := resource.ParseQuantity(js.FileStore.MaxSize)
	if err != nil || maxSize.Cmp(size) >= 0 {
		t.Errorf("fileStore.maxSize %q: want a quantity below the volume's %s, so the server refuses writes before the disk is full (%v)", js.FileStore.MaxSize, js.FileStore.PVC.Size, err)
	}
	switch s := js.Merge["sync_interval"]; s {
	case "always":
	case "":
		t.Error("jetstream.merge.sync_interval: the sync choice must be explicit (docs/deploy.md)")
	default:
		if d, err := time.ParseDuration(s); err != nil || d <= 0 || d > 2*time.Minute {
			t.Errorf("jetstream.merge.sync_interval %q: want \"always\" or a duration up to the server's 2m default", s)
		}
	}
	if !c.Monitor.Enabled || c.Monitor.Port != 8222 {
		t.Errorf("monitor: enabled %v port %d; KEDA and the exporter read 8222", c.Monitor.Enabled, c.Monitor.Port)
	}
	if _, ok := v.PodTemplate.TopologySpreadConstraints["topology.kubernetes.io/zone"]; !ok {
		t.Error("podTemplate.topologySpreadConstraints: want the servers spread over zones (the sync choice counts on it)")
	}
	if !v.PodDisruptionBudget.Enabled {
		t.Error("podDisruptionBudget: want it enabled (one server down at a time keeps the R3 quorum)")
	}
	if !v.PromExporter.Enabled {
		t.Error("promExporter: want the exporter on (the upstream NATS dashboards read it)")
	}
	res := v.Container.Merge.Resources
	if _, ok := res.Requests[corev1.ResourceMemory]; !ok {
		t.Error("container.merge.resources: want a memory request")
	}
	if lim, ok := res.Limits[corev1.ResourceMemory]; !ok {
		t.Error("container.merge.resources: want a memory limit")
	} else if gml := v.Container.Env["GOMEMLIMIT"].Value; gml != "" {
		q, err := resource.ParseQuantity(strings.TrimSuffix(gml, "B"))
		if err != nil || q.Cmp(lim) >= 0 {
			t.Errorf("GOMEMLIMIT %q: want it under the memory limit %s", gml, lim.String())
		}
	}

	// tenaz's config: R3 streams on the 3 servers, NATS at the chart's
	// client Service.
	r := rendered{render(t, "kustomize/overlays/example")}
	cm := r.configMap("tenaz-config")
	var tc struct {
		NATS struct {
			URL string `yaml:"url"`
		} `yaml:"nats"`
		Streams struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"streams"`
	}
	if err := yaml.Unmarshal([]byte(str(cm, "data", "tenaz.yaml")), &tc); err != nil {
		t.Fatal(err)
	}
	if tc.Streams.Replicas != c.Cluster.Replicas {
		t.Errorf("tenaz.yaml streams.replicas %d, want the cluster's %d servers", tc.Streams.Replicas, c.Cluster.Replicas)
	}
	urls := []string{tc.NATS.URL, str(r.configMap("tenaz-nats"), "data", "NATS_URL")}
	for _, u := range urls {
		if pu, err := url.Parse(u); err != nil || pu.Hostname() != natsRelease || pu.Port() != "4222" {
			t.Errorf("NATS URL %q: want the chart's client Service %s:4222", u, natsRelease)
		}
	}
}

// The sample config starts a service: the HTTP API's credentials are
// configured (daemon.Run refuses to start without them).
func TestSampleConfigAuth(t *testing.T) {
	r := rendered{render(t, "kustomize/overlays/example")}
	data := str(r.configMap("tenaz-config"), "data", "tenaz.yaml")
	for _, svc := range services {
		d := r.find("Deployment", "tenaz-"+svc)
		cfg, err := config.Parse([]byte(data), podEnv(t, r, d))
		if err != nil {
			t.Fatalf("tenaz-%s: %v", svc, err)
		}
		if _, err := auth.New(cfg); err != nil {
			t.Errorf("tenaz-%s: auth.New: %v", svc, err)
		}
	}
}
