package pgtest

import "os/exec"

// owner is who runs a cluster: on Windows, always this process's user.
type owner struct{}

// clusterOwner returns nil: this process's user.
func clusterOwner() (*owner, error) { return nil, nil }

// chown does nothing: the cluster is this process's user's.
func (o *owner) chown(string) error { return nil }

// runs leaves cmd to run as this process's user.
func (o *owner) runs(*exec.Cmd) {}
