// Command pause is the lab's Pod sandbox process (containerd's sandbox_image): it holds
// the Pod's namespaces, reaps the orphans it inherits as PID 1, and exits 0 on SIGTERM
// or SIGINT. The lab has no registry, so it builds its own instead of pulling one.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
