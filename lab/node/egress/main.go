// Command egress is the lab API server's way to its nodes: an HTTP CONNECT proxy on a Unix
// socket, named by the API server's egress selector configuration ("cluster" egress: the
// kubelets' ports for logs and exec, webhooks and aggregated APIs at their endpoints). The
// lab starts it inside one node's network namespace, from which every node address of the
// L2 segment and every Pod address is reachable; a Unix socket bound to a path is reachable
// from every network namespace, so the API server in the root namespace uses it without
// any route, forwarding or NAT there. Only destinations inside the -allow prefixes are
// dialed.
//
//	egress -socket PATH -allow 192.0.2.0/24 -allow 203.0.113.64/26 [-label TEXT]
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

type prefixFlags []netip.Prefix

func (p *prefixFlags) String() string {
	s := make([]string, len(*p))
	for i, x := range *p {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func (p *prefixFlags) Set(s string) error {
	x, err := netip.ParsePrefix(s)
	if err != nil {
		return err
	}
	*p = append(*p, x.Masked())
	return nil
}

// allowed: host:port with a literal address inside one of the prefixes.
func allowed(allow prefixFlags, hostport string) error {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%q is not an address (the proxy never resolves names)", host)
	}
	a = a.Unmap()
	for _, p := range allow {
		if p.Contains(a) {
			return nil
		}
	}
	return fmt.Errorf("%s is outside %s", a, allow.String())
}

func pipe(dst, src net.Conn, wg *sync.WaitGroup) {
	defer wg.Done()
	_, _ = io.Copy(dst, src)
	if c, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = c.CloseWrite()
	}
}

func handle(in net.Conn, allow prefixFlags) {
	defer in.Close()
	_ = in.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(in)
	req, err := http.ReadRequest(br)
	if err != nil {
		log.Printf("egress: reading the request: %v", err)
		return
	}
	_ = in.SetReadDeadline(time.Time{})
	reply := func(code int, msg string) {
		fmt.Fprintf(in, "HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n%s", code, http.StatusText(code), len(msg), msg)
	}
	if req.Method != http.MethodConnect {
		reply(http.StatusMethodNotAllowed, "only CONNECT\n")
		return
	}
	if err := allowed(allow, req.Host); err != nil {
		log.Printf("egress: refused CONNECT %s: %v", req.Host, err)
		reply(http.StatusForbidden, err.Error()+"\n")
		return
	}
	out, err := net.DialTimeout("tcp", req.Host, 5*time.Second)
	if err != nil {
		log.Printf("egress: CONNECT %s: %v", req.Host, err)
		reply(http.StatusBadGateway, err.Error()+"\n")
		return
	}
	defer out.Close()
	if _, err := io.WriteString(in, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent after its request (none for the API server, which waits for
	// the 200) go first.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := out.Write(b); err != nil {
			return
		}
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go pipe(out, in, &wg)
	go pipe(in, out, &wg)
	wg.Wait()
}

func main() {
	var allow prefixFlags
	socket := flag.String("socket", "", "the Unix socket to listen on (replaced if it exists)")
	flag.Var(&allow, "allow", "a prefix of destinations to dial (repeatable; nothing else is dialed)")
	label := flag.String("label", "", "free text shown in the log (the lab passes its state directory)")
	flag.Parse()
	if *socket == "" || len(allow) == 0 {
		fmt.Fprintln(os.Stderr, "usage: egress -socket PATH -allow PREFIX [-allow PREFIX...]")
		os.Exit(2)
	}
	if err := os.Remove(*socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Fatalf("egress: %v", err)
	}
	l, err := net.Listen("unix", *socket)
	if err != nil {
		log.Fatalf("egress: %v", err)
	}
	if err := os.Chmod(*socket, 0o600); err != nil {
		log.Fatalf("egress: %v", err)
	}
	log.Printf("egress %s: CONNECT on %s to %s", *label, *socket, allow.String())
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				log.Printf("egress: accept: %v", err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			go handle(c, allow)
		}
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	l.Close()
}
