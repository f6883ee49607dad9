// SPDX-License-Identifier: Apache-2.0

package charttest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/*.yaml from the chart")

const (
	chartDir  = "../outbox-relay"
	deployDir = "../../kubernetes"
	repoRoot  = "../../.."
)

// relayBin is the outbox-relay binary built from this checkout by TestMain.
var relayBin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "charttest")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	relayBin = filepath.Join(dir, "outbox-relay")
	build := exec.Command("go", "build", "-o", relayBin, "./cmd/outbox-relay")
	build.Dir = repoRoot
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "charttest: build outbox-relay:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// example is one shape the chart renders, kept as a manifest in deploy/kubernetes.
type example struct {
	values, manifest, release string
}

var examples = []example{
	{"values-sidecar-native.yaml", "sidecar-native.yaml", "orders"},
	{"values-sidecar-classic.yaml", "sidecar-classic.yaml", "orders"},
	{"values-relay-group.yaml", "relay-group.yaml", "shop-relay"},
}

// rendered is one chart rendering, strictly decoded.
type rendered struct {
	text       string // every manifest, as helm template prints them
	deployment *appsv1.Deployment
	configMap  *corev1.ConfigMap
	services   []*corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	podMonitor *monitoringv1.PodMonitor
	svcMonitor *monitoringv1.ServiceMonitor
	rule       *monitoringv1.PrometheusRule
	netpol     *networkingv1.NetworkPolicy
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	return c
}

// render renders the chart with the values file (none when "") and extra values on top, as
// `helm template release chart -f file` does, and decodes every manifest strictly.
func render(t *testing.T, c *chart.Chart, release, file string, extra map[string]any) rendered {
	t.Helper()
	vals := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &vals); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	vals = chartutil.CoalesceTables(extra, vals)
	rv, err := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: release, Namespace: "shop", IsInstall: true}, kube("v1.31.0"))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	files, err := engine.Render(c, rv)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var r rendered
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var out strings.Builder
	for _, name := range names {
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		for _, doc := range splitDocs(files[name]) {
			fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", name, doc)
			r.decode(t, name, doc)
		}
	}
	r.text = out.String()
	return r
}

// splitDocs splits a rendered template into its manifests, dropping empty ones.
func splitDocs(s string) []string {
	var docs []string
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(s, -1) {
		d = strings.TrimSpace(d)
		body := regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(d, "")
		if strings.TrimSpace(body) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

// decode strictly decodes doc into the API type of its kind: an unknown or misplaced field
// fails the test, as the API server would refuse it.
func (r *rendered) decode(t *testing.T, file, doc string) {
	t.Helper()
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 Deployment":
		r.deployment = &appsv1.Deployment{}
		obj = r.deployment
	case "v1 ConfigMap":
		r.configMap = &corev1.ConfigMap{}
		obj = r.configMap
	case "v1 Service":
		s := &corev1.Service{}
		r.services = append(r.services, s)
		obj = s
	case "v1 Secret":
		obj = &corev1.Secret{}
	case "networking.k8s.io/v1 NetworkPolicy":
		r.netpol = &networkingv1.NetworkPolicy{}
		obj = r.netpol
	case "policy/v1 PodDisruptionBudget":
		r.pdb = &policyv1.PodDisruptionBudget{}
		obj = r.pdb
	case "monitoring.coreos.com/v1 PodMonitor":
		r.podMonitor = &monitoringv1.PodMonitor{}
		obj = r.podMonitor
	case "monitoring.coreos.com/v1 ServiceMonitor":
		r.svcMonitor = &monitoringv1.ServiceMonitor{}
		obj = r.svcMonitor
	case "monitoring.coreos.com/v1 PrometheusRule":
		r.rule = &monitoringv1.PrometheusRule{}
		obj = r.rule
	default:
		t.Fatalf("%s: a %s %s, which this test does not know: add its type", file, tm.APIVersion, tm.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
		t.Fatalf("%s: %s %s does not decode strictly: %v\n%s", file, tm.APIVersion, tm.Kind, err, doc)
	}
}

// relayContainer returns the relay's container and whether it is a native sidecar.
func relayContainer(t *testing.T, d *appsv1.Deployment) (corev1.Container, bool) {
	t.Helper()
	for _, c := range d.Spec.Template.Spec.InitContainers {
		if c.Name == "outbox-relay" {
			return c, true
		}
	}
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "outbox-relay" {
			return c, false
		}
	}
	t.Fatalf("deployment %s has no outbox-relay container", d.Name)
	return corev1.Container{}, false
}

// The manifests in deploy/kubernetes are the chart's rendering of the values files beside
// them: `go test -update` rewrites them after a change of the chart.
func TestExamplesAreTheChartsRendering(t *testing.T) {
	c := loadChart(t)
	for _, ex := range examples {
		r := render(t, c, ex.release, filepath.Join(deployDir, ex.values), nil)
		want := "# Generated by deploy/helm/charttest from " + ex.values + ": edit the chart or the values, then\n" +
			"# cd deploy/helm/charttest && go test -run TestExamplesAreTheChartsRendering -update\n" + r.text
		path := filepath.Join(deployDir, ex.manifest)
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update)", err)
		}
		if string(got) != want {
			t.Errorf("%s is not the chart's rendering of %s: run go test -update in deploy/helm/charttest", ex.manifest, ex.values)
		}
	}
}

// Every shape: strictly decoded (render does it), one Deployment shaped as asked, the relay
// hardened (non-root, read-only root filesystem, no capabilities), probes on the relay's
// named port, and the configuration the binary reads accepted by the binary itself.
func TestEveryShapeIsValidForTheBinary(t *testing.T) {
	c := loadChart(t)
	cases := []struct {
		name, release, file string
		extra               map[string]any
		native, standalone  bool
	}{
		{"defaults", "orders", "", nil, true, false},
		{"sidecar-native", "orders", filepath.Join(deployDir, "values-sidecar-native.yaml"), nil, true, false},
		{"sidecar-classic", "orders", filepath.Join(deployDir, "values-sidecar-classic.yaml"), nil, false, false},
		{"relay-group", "shop-relay", filepath.Join(deployDir, "values-relay-group.yaml"), nil, false, true},
		{"other-port-and-shutdown", "orders", "", map[string]any{"config": map[string]any{
			"http": map[string]any{"addr": "0.0.0.0:9100"}, "relay": map[string]any{"shutdown_timeout": "30s"}},
			"terminationGracePeriodSeconds": 60}, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, c, tc.release, tc.file, tc.extra)
			d := r.deployment
			if d == nil || r.configMap == nil {
				t.Fatalf("no Deployment or ConfigMap rendered:\n%s", r.text)
			}
			relay, native := relayContainer(t, d)
			if native != tc.native {
				t.Errorf("native sidecar = %v, want %v", native, tc.native)
			}
			if native && (relay.RestartPolicy == nil || *relay.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				t.Errorf("a native sidecar needs restartPolicy Always, got %v", relay.RestartPolicy)
			}
			app := slices.ContainsFunc(d.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name != "outbox-relay" })
			if tc.standalone == app {
				t.Errorf("standalone = %v but the pod's containers are %+v", tc.standalone, d.Spec.Template.Spec.Containers)
			}
			checkHardened(t, d, relay)
			env := binaryEnv(t, r, relay)
			eff := runConfig(t, env)
			// Without enableServiceLinks: false, Services named outbox* in the namespace (this
			// chart's metrics Service among them) put their links in the environment: the
			// relay must start all the same.
			links := append(env, serviceLinks("outbox-relay", "10.96.12.34", 9464)...)
			for _, svc := range r.services {
				links = append(links, serviceLinks(svc.Name, "10.96.0.7", int(svc.Spec.Ports[0].Port))...)
			}
			runConfig(t, links)
			checkPortsAndProbes(t, r, relay, eff, tc.standalone, native)
			checkGrace(t, d, eff)
			checkMonitoring(t, r, tc.standalone)
			checkNetworkPolicy(t, r, relay)
		})
	}
}

// checkNetworkPolicy: a NetworkPolicy selects the relay's pods and admits the relay's HTTP port
// only from the configured peers, and the app's ports (sidecar mode) from anyone.
func checkNetworkPolicy(t *testing.T, r rendered, relay corev1.Container) {
	t.Helper()
	np := r.netpol
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	if !matches(np.Spec.PodSelector, r.deployment.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy selects %v, not the pods %v", np.Spec.PodSelector.MatchLabels, r.deployment.Spec.Template.Labels)
	}
	relayPort := map[int32]bool{}
	for _, p := range relay.Ports {
		relayPort[p.ContainerPort] = true
	}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if relayPort[p.Port.IntVal] && len(rule.From) == 0 {
				t.Errorf("the relay's port %d is open to every peer", p.Port.IntVal)
			}
		}
	}
	for _, c := range r.deployment.Spec.Template.Spec.Containers {
		if c.Name == "outbox-relay" {
			continue
		}
		for _, cp := range c.Ports {
			if !admitsFromAnyone(np, cp.ContainerPort) {
				t.Errorf("the app's port %d is cut off by the NetworkPolicy", cp.ContainerPort)
			}
		}
	}
}

func admitsFromAnyone(np *networkingv1.NetworkPolicy, port int32) bool {
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.IntVal == port && len(rule.From) == 0 {
				return true
			}
		}
	}
	return false
}

// checkHardened: non-root, read-only root filesystem, nothing added to the relay; no service
// links in the pod.
func checkHardened(t *testing.T, d *appsv1.Deployment, relay corev1.Container) {
	t.Helper()
	sc := relay.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("relay securityContext not hardened: %+v", sc)
	}
	if sc != nil && (sc.RunAsUser == nil || *sc.RunAsUser == 0) {
		t.Errorf("relay runs as root: %+v", sc.RunAsUser)
	}
	if es := d.Spec.Template.Spec.EnableServiceLinks; es == nil || *es {
		t.Error("enableServiceLinks is not false")
	}
	if a := d.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Error("automountServiceAccountToken is not false: the pod would carry a token the relay never uses")
	}
	if len(relay.Command) > 0 || !slices.Equal(relay.Args, []string{"run"}) {
		t.Errorf("relay command %v args %v, want the image's entrypoint with run", relay.Command, relay.Args)
	}
	for _, e := range relay.Env {
		if e.Value != "" && (strings.Contains(e.Name, "DSN") || strings.Contains(e.Name, "PASSWORD") || strings.Contains(e.Name, "TOKEN") || strings.Contains(e.Name, "KEY")) {
			t.Errorf("secret %s given as a plain value, not from a Secret", e.Name)
		}
	}
}

// binaryEnv is the relay container's environment as the kubelet would give it: the Secret's
// keys filled with valid stand-ins, OUTBOX_CONFIG pointing at the ConfigMap's file written
// where the mount says (under a temporary root).
func binaryEnv(t *testing.T, r rendered, relay corev1.Container) []string {
	t.Helper()
	root := t.TempDir()
	var mount *corev1.VolumeMount
	for i, m := range relay.VolumeMounts {
		if m.Name == "outbox-relay-config" {
			mount = &relay.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly {
		t.Fatalf("the relay does not mount its ConfigMap read-only: %+v", relay.VolumeMounts)
	}
	vol := slices.IndexFunc(r.deployment.Spec.Template.Spec.Volumes, func(v corev1.Volume) bool {
		return v.Name == mount.Name && v.ConfigMap != nil && v.ConfigMap.Name == r.configMap.Name
	})
	if vol < 0 {
		t.Fatalf("volume %s is not the ConfigMap %s", mount.Name, r.configMap.Name)
	}
	dir := filepath.Join(root, mount.MountPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range r.configMap.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	cfgFile := ""
	for _, e := range relay.Env {
		switch {
		case e.Name == "OUTBOX_CONFIG":
			if !strings.HasPrefix(e.Value, mount.MountPath+"/") {
				t.Errorf("OUTBOX_CONFIG=%s is not in the mount %s", e.Value, mount.MountPath)
			}
			cfgFile = filepath.Join(root, e.Value)
			env = append(env, "OUTBOX_CONFIG="+cfgFile)
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			if e.ValueFrom.SecretKeyRef.Name == "" {
				t.Errorf("%s: no Secret named", e.Name)
			}
			env = append(env, e.Name+"="+standIn(e.Name))
		case e.ValueFrom != nil:
			t.Errorf("%s: only Secrets are expected as sources", e.Name)
		default:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	if cfgFile == "" {
		t.Fatal("no OUTBOX_CONFIG: the ConfigMap is not read")
	}
	return env
}

// standIn is a valid value for a secret variable; each DSN names its own database.
func standIn(name string) string {
	if strings.HasSuffix(name, "_DSN") {
		return "relay:pw@tcp(mysql.shop.svc:3306)/" + strings.ToLower(strings.TrimSuffix(name, "_DSN"))
	}
	return "stand-in-secret-0123456789"
}

// effective is what `outbox-relay config` prints that the manifests depend on.
type effective struct {
	HTTP struct {
		Addr string `json:"addr"`
	} `json:"http"`
	Relay struct {
		ShutdownTimeout string `json:"shutdown_timeout"`
	} `json:"relay"`
}

// runConfig runs the binary's config command with exactly env; an unknown key in the file or
// an unknown OUTBOX_ variable would exit 2 naming it.
func runConfig(t *testing.T, env []string) effective {
	t.Helper()
	cmd := exec.Command(relayBin, "config")
	cmd.Env = env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("outbox-relay config with the rendered environment: %v\n%s\nenv: %v", err, errOut.String(), env)
	}
	var eff effective
	if err := yaml.Unmarshal(out.Bytes(), &eff); err != nil {
		t.Fatalf("config output: %v\n%s", err, out.String())
	}
	return eff
}

// checkPortsAndProbes: the relay's container port is the port of the http.addr the binary
// will listen on; probes use it, on the paths the binary serves.
func checkPortsAndProbes(t *testing.T, r rendered, relay corev1.Container, eff effective, standalone, native bool) {
	t.Helper()
	port := eff.HTTP.Addr[strings.LastIndex(eff.HTTP.Addr, ":")+1:]
	if len(relay.Ports) != 1 || fmt.Sprint(relay.Ports[0].ContainerPort) != port || relay.Ports[0].Name != "relay-http" {
		t.Fatalf("relay ports %+v, the binary listens on %s", relay.Ports, eff.HTTP.Addr)
	}
	probes := map[string]*corev1.Probe{"startup": relay.StartupProbe, "liveness": relay.LivenessProbe, "readiness": relay.ReadinessProbe}
	wantPath := map[string]string{"startup": "/healthz", "liveness": "/healthz", "readiness": "/readyz"}
	for kind, p := range probes {
		if p == nil {
			if kind == "readiness" && !standalone {
				continue // sidecar: by default no readiness (docs/kubernetes.md)
			}
			if kind == "startup" && native {
				continue // the app container would wait for it
			}
			t.Errorf("no %s probe", kind)
			continue
		}
		if p.HTTPGet == nil || p.HTTPGet.Path != wantPath[kind] || p.HTTPGet.Port.String() != relay.Ports[0].Name {
			t.Errorf("%s probe %+v, want GET %s on %s", kind, p.HTTPGet, wantPath[kind], relay.Ports[0].Name)
		}
		if !slices.Contains(servedPaths, p.HTTPGet.Path) {
			t.Errorf("%s probe path %s is not served by the binary (%v)", kind, p.HTTPGet.Path, servedPaths)
		}
	}
	if native && relay.StartupProbe != nil {
		t.Error("a native sidecar with a startup probe: the app container waits for it")
	}
	for _, s := range r.services {
		for _, sp := range s.Spec.Ports {
			if sp.TargetPort.String() != relay.Ports[0].Name || fmt.Sprint(sp.Port) != port {
				t.Errorf("service %s port %+v does not reach the relay's %s", s.Name, sp, eff.HTTP.Addr)
			}
		}
	}
}

// servedPaths are the relay's HTTP paths the manifests may use; TestProbesAgainstTheRelay
// checks them on a running relay.
var servedPaths = []string{"/healthz", "/readyz", "/metrics"}

// checkGrace: the pod's grace period covers the relay's shutdown (relay.shutdown_timeout for
// the sends in flight) plus 15 s for their write-back, the lock's release and the HTTP
// server's 2 s, and with a native sidecar the app's shutdown before it.
func checkGrace(t *testing.T, d *appsv1.Deployment, eff effective) {
	t.Helper()
	st, err := time.ParseDuration(eff.Relay.ShutdownTimeout)
	if err != nil {
		t.Fatalf("relay.shutdown_timeout %q: %v", eff.Relay.ShutdownTimeout, err)
	}
	g := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if g == nil || time.Duration(*g)*time.Second < st+15*time.Second {
		t.Errorf("terminationGracePeriodSeconds %v does not cover relay.shutdown_timeout %s + 15s", g, st)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 || ru.MaxSurge == nil || ru.MaxSurge.IntValue() != 1 {
		t.Errorf("rolling update %+v, want maxSurge 1, maxUnavailable 0", ru)
	}
}

// checkMonitoring: the monitors select the Deployment's pods on the relay's port, keep the
// job label the alerts expect, and the PodDisruptionBudget selects the same pods.
func checkMonitoring(t *testing.T, r rendered, standalone bool) {
	t.Helper()
	podLabels := r.deployment.Spec.Template.Labels
	selects := func(sel metav1.LabelSelector) bool {
		for k, v := range sel.MatchLabels {
			if podLabels[k] != v {
				return false
			}
		}
		return len(sel.MatchLabels) > 0
	}
	if r.pdb == nil || !selects(*r.pdb.Spec.Selector) {
		t.Errorf("no PodDisruptionBudget selecting the pods")
	}
	if r.podMonitor != nil {
		if !selects(r.podMonitor.Spec.Selector) || len(r.podMonitor.Spec.PodMetricsEndpoints) != 1 ||
			r.podMonitor.Spec.PodMetricsEndpoints[0].Port == nil || *r.podMonitor.Spec.PodMetricsEndpoints[0].Port != "relay-http" {
			t.Errorf("PodMonitor does not scrape the relay's port: %+v", r.podMonitor.Spec)
		}
	}
	if r.svcMonitor != nil {
		if !standalone || len(r.services) != 1 || !selects(r.svcMonitor.Spec.Selector) && !matches(r.svcMonitor.Spec.Selector, r.services[0].Labels) {
			t.Errorf("ServiceMonitor without its Service: %+v", r.svcMonitor.Spec)
		}
	}
	if r.podMonitor == nil && r.svcMonitor == nil {
		t.Error("neither a PodMonitor nor a ServiceMonitor")
	}
	if r.rule == nil {
		t.Fatal("no PrometheusRule")
	}
	// The rules are deploy/prometheus/alerts.yml's, which promtool tests (make test-alerts).
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var want monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(b, &want); err != nil {
		t.Fatalf("alerts.yml as a PrometheusRule spec: %v", err)
	}
	if got, _ := yaml.Marshal(r.rule.Spec); !bytes.Equal(got, must(yaml.Marshal(want))) {
		t.Errorf("the PrometheusRule differs from deploy/prometheus/alerts.yml")
	}
	if len(want.Groups) == 0 || len(want.Groups[0].Rules) < 10 {
		t.Errorf("alerts.yml decoded to %d groups", len(want.Groups))
	}
}

func matches(sel metav1.LabelSelector, labels map[string]string) bool {
	for k, v := range sel.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The chart's copy of the alert rules is deploy/prometheus/alerts.yml (a chart cannot read
// files outside its directory).
func TestChartAlertsAreTheShippedOnes(t *testing.T) {
	a, err := os.ReadFile(filepath.Join(repoRoot, "deploy/prometheus/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(chartDir, "files/alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("deploy/helm/outbox-relay/files/alerts.yml differs from deploy/prometheus/alerts.yml: copy it")
	}
}

// kube is the capabilities of a cluster of the given version (helm's default is v1.20.0).
func kube(version string) *chartutil.Capabilities {
	c := *chartutil.DefaultCapabilities
	v := strings.Split(strings.TrimPrefix(version, "v"), ".")
	c.KubeVersion = chartutil.KubeVersion{Version: version, Major: v[0], Minor: v[1]}
	return &c
}

// Values the chart cannot honour are refused at rendering, naming the value: an unknown mode,
// and a native sidecar on a cluster too old for it (its restartPolicy could be dropped, leaving
// an init container that never exits in front of the app).
func TestBadValuesAreRefused(t *testing.T) {
	c := loadChart(t)
	for _, tc := range []struct {
		vals    map[string]any
		version string
		want    string
	}{
		{map[string]any{"mode": "daemonset"}, "v1.31.0", "mode: must be sidecar or standalone"},
		// Secrets under config: would land in the ConfigMap.
		{map[string]any{"config": map[string]any{"redis": map[string]any{"password": "hunter2"}}}, "v1.31.0", "config.redis.password: a secret does not go under config:"},
		{map[string]any{"config": map[string]any{"http": map[string]any{"admin_token": "0123456789abcdef0"}}}, "v1.31.0", "config.http.admin_token: a secret"},
		{map[string]any{"config": map[string]any{"rocketmq": map[string]any{"secret_key": "s3cr3t"}}}, "v1.31.0", "config.rocketmq.secret_key: a secret"},
		{map[string]any{"config": map[string]any{"mysql": map[string]any{"dsn": "relay:pw@tcp(db:3306)/shop"}}}, "v1.31.0", "config.mysql.dsn: a DSN with a password"},
		{map[string]any{"config": map[string]any{"databases": []any{map[string]any{"name": "a", "dsn": "relay:pw@tcp(db:3306)/a"}}}}, "v1.31.0", "config.databases[0].dsn: a DSN with a password"},
		{map[string]any{}, "v1.27.4", "nativeSidecar: needs Kubernetes 1.29 or later, the target is v1.27.4"},
		{map[string]any{}, "v1.20.0", "pass --kube-version"},
	} {
		rv, err := chartutil.ToRenderValues(c, tc.vals, chartutil.ReleaseOptions{Name: "x", Namespace: "x"}, kube(tc.version))
		if err != nil {
			t.Fatal(err)
		}
		_, err = engine.Render(c, rv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v on %s: %v, want %q", tc.vals, tc.version, err, tc.want)
		}
	}
	// The classic form and the relay group render on older clusters.
	for _, vals := range []map[string]any{{"nativeSidecar": false}, {"mode": "standalone"}} {
		rv, _ := chartutil.ToRenderValues(c, vals, chartutil.ReleaseOptions{Name: "x", Namespace: "x"}, kube("v1.27.4"))
		if _, err := engine.Render(c, rv); err != nil {
			t.Errorf("%v on 1.27: %v", vals, err)
		}
	}
}

// The Secret example has every key the example values read.
func TestSecretExampleHasEveryKey(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(deployDir, "secret.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := yaml.UnmarshalStrict(b, &s); err != nil {
		t.Fatalf("secret.example.yaml: %v", err)
	}
	c := loadChart(t)
	for _, ex := range examples {
		r := render(t, c, ex.release, filepath.Join(deployDir, ex.values), nil)
		relay, _ := relayContainer(t, r.deployment)
		for _, e := range relay.Env {
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				continue
			}
			ref := e.ValueFrom.SecretKeyRef
			if _, ok := s.StringData[ref.Key]; !ok || ref.Name != s.Name {
				t.Errorf("%s: %s reads %s/%s, which secret.example.yaml lacks", ex.values, e.Name, ref.Name, ref.Key)
			}
		}
	}
}

// The chart's values are documented in docs/kubernetes.md (its "## Values" table names every
// top-level value and nothing else), and every configuration key the values and the examples
// set is a row of docs/configuration.md, the relay's reference.
func TestValuesReferenceMatchesTheDocs(t *testing.T) {
	doc := string(must(os.ReadFile(filepath.Join(repoRoot, "docs/kubernetes.md"))))
	confDoc := string(must(os.ReadFile(filepath.Join(repoRoot, "docs/configuration.md"))))
	_, section, ok := strings.Cut(doc, "\n## Values\n")
	if !ok {
		t.Fatal(`docs/kubernetes.md has no "## Values" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	var vals map[string]any
	if err := yaml.Unmarshal(must(os.ReadFile(filepath.Join(chartDir, "values.yaml"))), &vals); err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, row := range regexp.MustCompile("(?m)^\\| (`[^|]+`) \\|").FindAllStringSubmatch(section, -1) {
		for _, m := range regexp.MustCompile("`([A-Za-z]+)`").FindAllStringSubmatch(row[1], -1) {
			documented[m[1]] = true
		}
	}
	for k := range vals {
		if !documented[k] {
			t.Errorf("value %s is not in docs/kubernetes.md's values table", k)
		}
	}
	for k := range documented {
		if _, ok := vals[k]; !ok {
			t.Errorf("docs/kubernetes.md documents value %s, which values.yaml does not have", k)
		}
	}
	files := []string{filepath.Join(chartDir, "values.yaml")}
	for _, ex := range examples {
		files = append(files, filepath.Join(deployDir, ex.values))
	}
	for _, f := range files {
		var v struct {
			Config    map[string]any `json:"config"`
			SecretEnv []struct {
				Key string `json:"key"`
			} `json:"secretEnv"`
		}
		if err := yaml.Unmarshal(must(os.ReadFile(f)), &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		keys := flatten("", v.Config)
		for _, s := range v.SecretEnv {
			keys = append(keys, s.Key)
		}
		for _, k := range keys {
			if !strings.Contains(confDoc, "| `"+k+"` |") {
				t.Errorf("%s sets %s, which docs/configuration.md has no row for", filepath.Base(f), k)
			}
		}
	}
}

// flatten lists the dotted keys of a nested configuration (lists are leaves).
func flatten(prefix string, m map[string]any) []string {
	var out []string
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok {
			out = append(out, flatten(key, sub)...)
		} else {
			out = append(out, key)
		}
	}
	return out
}

// serviceLinks are the variables the kubelet sets for a Service with ClusterIP ip and one TCP
// port named relay-http (pkg/kubelet/envvars).
func serviceLinks(name, ip string, port int) []string {
	svc := strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	pre := fmt.Sprintf("%s_PORT_%d_TCP", svc, port)
	url := fmt.Sprintf("tcp://%s:%d", ip, port)
	return []string{
		svc + "_SERVICE_HOST=" + ip, fmt.Sprintf("%s_SERVICE_PORT=%d", svc, port),
		fmt.Sprintf("%s_SERVICE_PORT_RELAY_HTTP=%d", svc, port), svc + "_PORT=" + url,
		pre + "=" + url, pre + "_PROTO=tcp", fmt.Sprintf("%s_PORT=%d", pre, port), pre + "_ADDR=" + ip,
	}
}
