package k8s

import (
	"errors"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"loupe/internal/config/check"
)

// Config is the kubernetes section of the agent's configuration, owned by
// this package (the config package embeds it, as the capture's).
//
// Enrichment is on when a kubeconfig is given or the agent runs in a pod
// (the in-cluster configuration: a service account token and the
// KUBERNETES_SERVICE_HOST variable); otherwise it is off. A kubeconfig in
// the home directory is not looked for: an agent on a workstation does not
// start watching whichever cluster kubectl last pointed at.
type Config struct {
	Kubeconfig string        `yaml:"kubeconfig" env:"LOUPE_KUBERNETES_KUBECONFIG" flag:"kubeconfig" arg:"path" help:"kubeconfig at path of the cluster whose pod, workload, service and node names enrich records; empty: the in-cluster configuration when the agent runs in a pod, else none (no names)"`
	NodeName   string        `yaml:"node_name" env:"LOUPE_KUBERNETES_NODE_NAME" flag:"node-name" help:"this node's name in the cluster: only its pods are watched; empty: the NODE_NAME environment variable (the DaemonSet sets it), else every pod of the cluster"`
	History    time.Duration `yaml:"history" env:"LOUPE_KUBERNETES_HISTORY" flag:"kubernetes-history" help:"how long the past holders of an address are kept once they let it go, to name records counted before, 10s..24h"`
}

// DefaultConfig is the section's defaults: the in-cluster configuration if
// any, ten minutes of history (twice the longest a flow record can wait in
// the kernel and the delivery queues with the default timeouts, with room
// for a slow exporter).
func DefaultConfig() Config {
	return Config{History: 10 * time.Minute}
}

// CheckKey checks one key of the section; the message does not name it.
func (c Config) CheckKey(key string) error {
	switch key {
	case "kubeconfig":
		// Read when the resolver starts, where an unreadable file stops
		// the start with its reason.
		if c.Kubeconfig == "" {
			return nil
		}
		return check.Path(c.Kubeconfig)
	case "node_name":
		if len(c.NodeName) > 253 {
			return fmt.Errorf("a node name is at most 253 bytes, got %d", len(c.NodeName))
		}
	case "history":
		return check.Duration(c.History, 10*time.Second, 24*time.Hour)
	}
	return nil
}

// node returns the node whose pods are watched: node_name, else the
// NODE_NAME environment variable, else "" (every pod).
func (c Config) node() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	return os.Getenv("NODE_NAME")
}

// errNoCluster says why enrichment is off.
var errNoCluster = errors.New("no kubeconfig given and not running in a pod (no in-cluster configuration)")

// restConfig finds the cluster: the kubeconfig if given, else the
// in-cluster configuration. It returns errNoCluster when there is neither,
// and where the configuration came from.
func (c Config) restConfig() (*rest.Config, string, error) {
	if c.Kubeconfig != "" {
		rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			return nil, "", fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
		}
		return rc, c.Kubeconfig, nil
	}
	rc, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, "", errNoCluster
	}
	if err != nil {
		return nil, "", fmt.Errorf("in-cluster configuration: %w", err)
	}
	return rc, "in-cluster", nil
}
