package stdio

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/windows"
)

// treeRole makes the test binary a server that starts a child and ignores
// its input's end ("server"), or that child ("child").
const treeRole = "GUARD_TEST_TREE_ROLE"

// TestTreeHelper is the server and its child when treeRole says so.
func TestTreeHelper(t *testing.T) {
	switch os.Getenv(treeRole) {
	case "server":
		child := exec.Command(os.Args[0], "-test.run=^TestTreeHelper$")
		child.Env = append(os.Environ(), treeRole+"=child")
		if err := child.Start(); err != nil {
			os.Exit(3)
		}
		_ = os.WriteFile(os.Getenv("GUARD_TEST_TREE_PID"), []byte(strconv.Itoa(child.Process.Pid)), 0o600)
		time.Sleep(time.Minute)
		os.Exit(0)
	case "child":
		time.Sleep(time.Minute)
		os.Exit(0)
	}
}

// A server that outstays its grace is ended with the processes it
// started: its job object is terminated.
func TestEndingAServerEndsItsChildren(t *testing.T) {
	env := append(os.Environ(), treeRole+"=server")
	child, end := serverWithChild(t, []string{os.Args[0], "-test.run=^TestTreeHelper$"}, env)
	h, err := windows.OpenProcess(windows.SYNCHRONIZE, false, uint32(child))
	if err != nil {
		t.Fatal(err)
	}
	defer windows.CloseHandle(h)
	if code := end(); code != terminatedStatus {
		t.Errorf("exit %d, want %d", code, terminatedStatus)
	}
	if ev, err := windows.WaitForSingleObject(h, 5000); err != nil || ev != windows.WAIT_OBJECT_0 {
		t.Fatalf("the server's child outlived it: %d %v", ev, err)
	}
}
