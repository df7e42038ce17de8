package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/Masterminds/semver"
)

// defaultKubeVersion is the cluster version assumed without --kube-version,
// as `helm template` assumes the version of its built-in client libraries.
const defaultKubeVersion = "1.30.0"

// KubeVersion mirrors Helm's chartutil.KubeVersion: Version carries the "v".
type KubeVersion struct {
	Version string
	Major   string
	Minor   string
}

func (k KubeVersion) String() string { return k.Version }

// GitVersion is kept by Helm for old charts; it equals Version.
func (k KubeVersion) GitVersion() string { return k.Version }

// VersionSet is .Capabilities.APIVersions; Has is an exact string match on
// "group/version" or "group/version/Kind", as in Helm.
type VersionSet []string

func (v VersionSet) Has(apiVersion string) bool {
	for _, x := range v {
		if x == apiVersion {
			return true
		}
	}
	return false
}

// HelmVersion is .Capabilities.HelmVersion; charts rarely read it.
type HelmVersion struct {
	Version string
}

type Capabilities struct {
	KubeVersion KubeVersion
	APIVersions VersionSet
	HelmVersion HelmVersion
}

// builtinAPIs are the group/versions a Kubernetes 1.30 API server serves,
// each with its common kinds. Helm's list comes from the client-go scheme;
// this is the subset charts gate on. Anything else must come from
// --api-versions (e.g. monitoring.coreos.com/v1 for ServiceMonitor), just as
// `helm template` needs --api-versions for CRD-provided APIs.
var builtinAPIs = map[string][]string{
	"v1": {"Binding", "ConfigMap", "Endpoints", "Event", "LimitRange", "Namespace", "Node",
		"PersistentVolume", "PersistentVolumeClaim", "Pod", "PodTemplate", "ReplicationController",
		"ResourceQuota", "Secret", "Service", "ServiceAccount"},
	"apps/v1":                         {"ControllerRevision", "DaemonSet", "Deployment", "ReplicaSet", "StatefulSet"},
	"batch/v1":                        {"CronJob", "Job"},
	"policy/v1":                       {"PodDisruptionBudget", "Eviction"},
	"autoscaling/v1":                  {"HorizontalPodAutoscaler", "Scale"},
	"autoscaling/v2":                  {"HorizontalPodAutoscaler"},
	"networking.k8s.io/v1":            {"Ingress", "IngressClass", "NetworkPolicy"},
	"rbac.authorization.k8s.io/v1":    {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"},
	"storage.k8s.io/v1":               {"CSIDriver", "CSINode", "CSIStorageCapacity", "StorageClass", "VolumeAttachment"},
	"apiextensions.k8s.io/v1":         {"CustomResourceDefinition"},
	"admissionregistration.k8s.io/v1": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"},
	"apiregistration.k8s.io/v1":       {"APIService"},
	"authentication.k8s.io/v1":        {"TokenReview", "SelfSubjectReview"},
	"authorization.k8s.io/v1":         {"LocalSubjectAccessReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview"},
	"certificates.k8s.io/v1":          {"CertificateSigningRequest"},
	"coordination.k8s.io/v1":          {"Lease"},
	"discovery.k8s.io/v1":             {"EndpointSlice"},
	"events.k8s.io/v1":                {"Event"},
	"flowcontrol.apiserver.k8s.io/v1": {"FlowSchema", "PriorityLevelConfiguration"},
	"node.k8s.io/v1":                  {"RuntimeClass"},
	"scheduling.k8s.io/v1":            {"PriorityClass"},
}

func newCapabilities(kubeVersion string, extra []string) (*Capabilities, error) {
	sv, err := semver.NewVersion(strings.TrimPrefix(kubeVersion, "v"))
	if err != nil {
		return nil, fmt.Errorf("invalid --kube-version %q: %v", kubeVersion, err)
	}
	caps := &Capabilities{
		KubeVersion: KubeVersion{
			Version: "v" + sv.String(),
			Major:   strconv.FormatUint(sv.Major(), 10),
			Minor:   strconv.FormatUint(sv.Minor(), 10),
		},
		HelmVersion: HelmVersion{Version: "v3.14.0-helm-render"},
	}
	for gv, kinds := range builtinAPIs {
		caps.APIVersions = append(caps.APIVersions, gv)
		for _, k := range kinds {
			caps.APIVersions = append(caps.APIVersions, gv+"/"+k)
		}
	}
	caps.APIVersions = append(caps.APIVersions, extra...)
	return caps, nil
}
