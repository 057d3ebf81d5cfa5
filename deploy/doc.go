// Package deploy holds no code: its tests check the deployment files next
// to it (the systemd unit, the Helm chart and the manifests rendered from
// it) against the agent's own defaults, configuration loader and the
// least privilege it runs with.
package deploy
