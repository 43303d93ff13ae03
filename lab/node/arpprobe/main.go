// Command arpprobe measures how continuously an IPv4 address is answered on a link: it
// broadcasts an ARP request for the address every -interval from -iface (in the network
// namespace it runs in: the lab starts it with nsenter in its client namespace) until
// SIGTERM, SIGINT or -duration, records every reply with its time and sender MAC, and
// prints one summary line:
//
//	probes=N replies=N first_reply_ms=N max_gap_ms=N dark_periods=N switches=N double=N macs=MAC:N,...
//
// max_gap_ms is the longest time between two consecutive replies (the first reply counts
// from the start); dark_periods counts gaps longer than three intervals; switches counts
// replies whose MAC differs from the one before; double counts probe intervals in which
// more than one MAC answered. With -v every reply is printed too ("reply MS MAC").
//
//	arpprobe -iface eth0 -target 198.51.100.10 [-interval 50ms] [-duration 0] [-v]
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type reply struct {
	at  time.Duration
	mac string
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func main() {
	iface := flag.String("iface", "", "the interface to probe from")
	target := flag.String("target", "", "the IPv4 address to ask for")
	interval := flag.Duration("interval", 50*time.Millisecond, "time between requests")
	duration := flag.Duration("duration", 0, "stop after this long (0: at SIGTERM or SIGINT)")
	verbose := flag.Bool("v", false, "print every reply")
	flag.Parse()
	tgt, err := netip.ParseAddr(*target)
	if *iface == "" || err != nil || !tgt.Is4() || *interval <= 0 {
		fmt.Fprintln(os.Stderr, "usage: arpprobe -iface IFACE -target IPV4 [-interval D] [-duration D] [-v]")
		os.Exit(2)
	}
	ifi, err := net.InterfaceByName(*iface)
	if err != nil {
		log.Fatalf("arpprobe: %v", err)
	}
	if len(ifi.HardwareAddr) != 6 {
		log.Fatalf("arpprobe: %s has no Ethernet address", *iface)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		log.Fatalf("arpprobe: %v", err)
	}
	var src netip.Addr
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			src = p.Addr()
			break
		}
	}
	if !src.IsValid() {
		log.Fatalf("arpprobe: %s has no IPv4 address", *iface)
	}

	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		log.Fatalf("arpprobe: packet socket: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index}); err != nil {
		log.Fatalf("arpprobe: bind: %v", err)
	}
	// Receives wake up at least every 100 ms to notice the end.
	tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		log.Fatalf("arpprobe: %v", err)
	}

	// The request: Ethernet broadcast, ARP who-has target tell src.
	frame := make([]byte, 42)
	copy(frame[0:6], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(frame[6:12], ifi.HardwareAddr)
	binary.BigEndian.PutUint16(frame[12:14], unix.ETH_P_ARP)
	binary.BigEndian.PutUint16(frame[14:16], 1)      // Ethernet
	binary.BigEndian.PutUint16(frame[16:18], 0x0800) // IPv4
	frame[18], frame[19] = 6, 4
	binary.BigEndian.PutUint16(frame[20:22], 1) // request
	copy(frame[22:28], ifi.HardwareAddr)
	s4 := src.As4()
	copy(frame[28:32], s4[:])
	t4 := tgt.As4()
	copy(frame[38:42], t4[:])
	dst := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: ifi.Index, Halen: 6,
		Addr: [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}

	start := time.Now()
	var mu sync.Mutex
	var replies []reply
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1500)
		for {
			select {
			case <-done:
				return
			default:
			}
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				if err == unix.EAGAIN || err == unix.EINTR {
					continue
				}
				log.Fatalf("arpprobe: receive: %v", err)
			}
			// Ethernet header, then the ARP payload: a reply whose sender is the target.
			if n < 42 || binary.BigEndian.Uint16(buf[12:14]) != unix.ETH_P_ARP ||
				binary.BigEndian.Uint16(buf[20:22]) != 2 || [4]byte(buf[28:32]) != t4 {
				continue
			}
			r := reply{at: time.Since(start), mac: net.HardwareAddr(buf[22:28]).String()}
			mu.Lock()
			replies = append(replies, r)
			mu.Unlock()
			if *verbose {
				fmt.Printf("reply %d %s\n", r.at.Milliseconds(), r.mac)
			}
		}
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	var stop <-chan time.Time
	if *duration > 0 {
		stop = time.After(*duration)
	}
	tick := time.NewTicker(*interval)
	probes := 0
	var sent []time.Duration
loop:
	for {
		sent = append(sent, time.Since(start))
		if err := unix.Sendto(fd, frame, 0, dst); err != nil {
			log.Fatalf("arpprobe: send: %v", err)
		}
		probes++
		select {
		case <-tick.C:
		case <-sig:
			break loop
		case <-stop:
			break loop
		}
	}
	end := time.Since(start)
	// The last request's replies.
	time.Sleep(*interval)
	close(done)
	wg.Wait()
	unix.Close(fd)

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(replies, func(i, j int) bool { return replies[i].at < replies[j].at })
	counts := map[string]int{}
	var order []string
	switches, dark := 0, 0
	var maxGap time.Duration
	prev := time.Duration(0)
	for i, r := range replies {
		if counts[r.mac] == 0 {
			order = append(order, r.mac)
		}
		counts[r.mac]++
		if i > 0 && r.mac != replies[i-1].mac {
			switches++
		}
		gap := r.at - prev
		if gap > maxGap {
			maxGap = gap
		}
		if gap > 3**interval {
			dark++
		}
		prev = r.at
	}
	// Silence at the end counts too.
	if gap := end - prev; gap > maxGap {
		maxGap = gap
	}
	if end-prev > 3**interval {
		dark++
	}
	// Probe intervals with answers from more than one MAC.
	double := 0
	for i, t := range sent {
		next := end + *interval
		if i+1 < len(sent) {
			next = sent[i+1]
		}
		macs := map[string]bool{}
		for _, r := range replies {
			if r.at >= t && r.at < next {
				macs[r.mac] = true
			}
		}
		if len(macs) > 1 {
			double++
		}
	}
	first := int64(-1)
	if len(replies) > 0 {
		first = replies[0].at.Milliseconds()
	}
	var ms []string
	for _, m := range order {
		ms = append(ms, fmt.Sprintf("%s:%d", m, counts[m]))
	}
	fmt.Printf("probes=%d replies=%d first_reply_ms=%d max_gap_ms=%d dark_periods=%d switches=%d double=%d macs=%s\n",
		probes, len(replies), first, maxGap.Milliseconds(), dark, switches, double, strings.Join(ms, ","))
}
