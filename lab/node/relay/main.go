// Command relay gives a lab node's network namespace the API server: it listens on
// addresses inside that namespace and relays every TCP connection to an address of the
// namespace it was started in (the root namespace's 127.0.0.1:<API server port>), in
// user space, so that nothing is forwarded or NATed by the kernel. The listeners are
// opened on one OS thread that enters the node's namespace and returns; a socket keeps
// the namespace it was created in, and every dial happens from the root namespace.
//
//	relay -netns /run/netns/NAME -listen 203.0.113.129:443 -target 127.0.0.1:16443 [-label TEXT]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type listenFlags []string

func (l *listenFlags) String() string     { return strings.Join(*l, ",") }
func (l *listenFlags) Set(s string) error { *l = append(*l, s); return nil }

// listenIn opens TCP listeners on addrs inside the network namespace at nsPath.
func listenIn(nsPath string, addrs []string) ([]net.Listener, error) {
	runtime.LockOSThread()
	// The thread is never unlocked: if restoring its namespace failed it must not run
	// other goroutines, and a locked thread ends with its goroutine.
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, fmt.Errorf("entering %s: %w", nsPath, err)
	}
	var ls []net.Listener
	var lerr error
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			lerr = fmt.Errorf("listening on %s in %s: %w", a, nsPath, err)
			break
		}
		ls = append(ls, l)
	}
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// Exit: this thread may not go back to the scheduler in the wrong namespace.
		log.Fatalf("relay: returning to the original namespace: %v", err)
	}
	runtime.UnlockOSThread()
	if lerr != nil {
		for _, l := range ls {
			l.Close()
		}
		return nil, lerr
	}
	return ls, nil
}

func pipe(dst, src *net.TCPConn, wg *sync.WaitGroup) {
	defer wg.Done()
	_, _ = io.Copy(dst, src)
	_ = dst.CloseWrite()
}

func serve(l net.Listener, target string) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.Printf("relay: accept on %s: %v", l.Addr(), err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go func(in *net.TCPConn) {
			defer in.Close()
			o, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				log.Printf("relay: %s -> %s: %v", in.RemoteAddr(), target, err)
				return
			}
			out := o.(*net.TCPConn)
			defer out.Close()
			var wg sync.WaitGroup
			wg.Add(2)
			go pipe(out, in, &wg)
			go pipe(in, out, &wg)
			wg.Wait()
		}(c.(*net.TCPConn))
	}
}

func main() {
	var listens listenFlags
	nsPath := flag.String("netns", "", "the network namespace to listen in (a /run/netns/NAME path)")
	flag.Var(&listens, "listen", "address to listen on inside the namespace (repeatable)")
	target := flag.String("target", "", "address to relay to, from the namespace relay was started in")
	label := flag.String("label", "", "free text shown in the log (the lab passes its node's state directory)")
	flag.Parse()
	if *nsPath == "" || len(listens) == 0 || *target == "" {
		fmt.Fprintln(os.Stderr, "usage: relay -netns PATH -listen ADDR [-listen ADDR...] -target ADDR")
		os.Exit(2)
	}
	ls, err := listenIn(*nsPath, listens)
	if err != nil {
		log.Fatalf("relay: %v", err)
	}
	for _, l := range ls {
		log.Printf("relay %s: %s in %s -> %s", *label, l.Addr(), *nsPath, *target)
		go serve(l, *target)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
