//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// owner is the unprivileged user that runs a cluster when the tests run
// as root, which PostgreSQL refuses; nil runs it as this process's user.
type owner struct{ uid, gid int }

// clusterOwner returns the owner of a new cluster: nobody, for root.
func clusterOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		return nil, fmt.Errorf("running as root, and no unprivileged user to run PostgreSQL as: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &owner{uid: uid, gid: gid}, nil
}

// chown gives path to the owner.
func (o *owner) chown(path string) error {
	if o == nil {
		return nil
	}
	return os.Chown(path, o.uid, o.gid)
}

// runs has cmd run as the owner.
func (o *owner) runs(cmd *exec.Cmd) {
	if o != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid)}}
	}
}
