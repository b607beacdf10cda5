package store

import (
	"runtime"

	"golang.org/x/sys/unix"
)

// backgroundNice is the nice value of the ingester's thread: a weight of
// about a tenth of the relays' threads', so that a relay woken by a
// message runs at once rather than wait for the end of the ingester's
// time slice, while the ingester still has its share when the machine is
// busy (the backlog it may build is bounded: maxBacklog).
const backgroundNice = 10

// background runs the calling goroutine, for the rest of its life, on a
// thread of its own whose scheduling priority is lowered (Linux schedules
// threads, each with its own nice value): the records it moves into the
// database are already durable in the journal, and no call waits for it,
// so its work yields to the calls'. The thread is never unlocked: it ends
// with the goroutine, and no other goroutine runs at its priority. A
// priority that cannot be set leaves the thread as it was.
func background() {
	runtime.LockOSThread()
	_ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), backgroundNice)
}
