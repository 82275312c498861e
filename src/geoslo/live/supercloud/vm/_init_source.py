"""The guest's /init, a static Go program (Supercloud, SoCC 2016, §2, §5.2: a node's VM
whose memory the pre-copy migration carries).

It mounts /dev and /proc and reads its knobs from the kernel command line
(``geoslo.fill_mib``, ``geoslo.headroom_mib``, ``geoslo.wss_mib``, ``geoslo.dirty_kbps``).
It writes one byte into every page of a buffer of ``fill_mib`` (capped to what the kernel
has available less ``headroom_mib``), so that round 0 of a migration really sends those
pages (QEMU sends a page of zeros as a few bytes); then it writes one byte per page into
the buffer's first ``wss_mib`` at ``dirty_kbps`` (1e3 bytes/s), page after page, round the
working set. On the second serial port (raw, no echo) it answers every line ``<token>``
with ``<token> <pages dirtied so far> <ms since boot>``: the outside prober's view of
availability. Only the Go standard library is used, so the build needs no download.
"""

GO_SOURCE = r"""package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const pageBytes = 4096

var dirtied atomic.Int64

func mounts() {
	os.Mkdir("/dev", 0o755)
	syscall.Mount("devtmpfs", "/dev", "devtmpfs", 0, "")
	os.Mkdir("/proc", 0o755)
	syscall.Mount("proc", "/proc", "proc", 0, "")
}

func knob(cmdline, name string, fallback int) int {
	for _, field := range strings.Fields(cmdline) {
		if value, ok := strings.CutPrefix(field, "geoslo."+name+"="); ok {
			if n, err := strconv.Atoi(value); err == nil && n >= 0 {
				return n
			}
		}
	}
	return fallback
}

func availableMB() int {
	data, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, _ := strconv.Atoi(fields[1])
			return kb / 1024
		}
	}
	return 0
}

func fill(buffer []byte) {
	for i := 0; i < len(buffer); i += pageBytes {
		buffer[i] = byte(i/pageBytes) | 1
	}
}

func dirty(buffer []byte, rateKBps int) {
	if rateKBps == 0 || len(buffer) < pageBytes {
		return
	}
	pages := len(buffer) / pageBytes
	perSecond := float64(rateKBps) * 1e3 / pageBytes
	started := time.Now()
	done, next := int64(0), 0
	for {
		time.Sleep(2 * time.Millisecond)
		due := int64(time.Since(started).Seconds() * perSecond)
		for ; done < due; done++ {
			buffer[next*pageBytes+int(done%7)]++
			next = (next + 1) % pages
		}
		dirtied.Store(done)
	}
}

func raw(fd uintptr) {
	var t syscall.Termios
	syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	t.Iflag &^= syscall.IGNBRK | syscall.BRKINT | syscall.PARMRK | syscall.ISTRIP |
		syscall.INLCR | syscall.IGNCR | syscall.ICRNL | syscall.IXON
	t.Oflag &^= syscall.OPOST
	t.Lflag &^= syscall.ECHO | syscall.ECHONL | syscall.ICANON | syscall.ISIG | syscall.IEXTEN
	t.Cflag &^= syscall.CSIZE | syscall.PARENB
	t.Cflag |= syscall.CS8
	t.Cc[syscall.VMIN], t.Cc[syscall.VTIME] = 1, 0
	syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCSETS, uintptr(unsafe.Pointer(&t)))
}

func answer(booted time.Time) {
	port, err := os.OpenFile("/dev/ttyS1", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		fmt.Println("geoslo-init: no /dev/ttyS1:", err)
		return
	}
	raw(port.Fd())
	lines := bufio.NewScanner(port)
	for lines.Scan() {
		token := strings.TrimSpace(lines.Text())
		if token == "" {
			continue
		}
		uptime := time.Since(booted).Milliseconds()
		fmt.Fprintf(port, "%s %d %d\n", token, dirtied.Load(), uptime)
	}
}

func main() {
	booted := time.Now()
	mounts()
	data, _ := os.ReadFile("/proc/cmdline")
	cmdline := string(data)
	fillMB := knob(cmdline, "fill_mib", 0)
	if limit := availableMB() - knob(cmdline, "headroom_mib", 32); fillMB > limit {
		fillMB = max(limit, 0)
	}
	wssMB := min(knob(cmdline, "wss_mib", 64), fillMB)
	rate := knob(cmdline, "dirty_kbps", 0)
	buffer := make([]byte, fillMB<<20)
	fill(buffer)
	fmt.Printf("geoslo-init: filled %d MiB, dirtying %d kB/s of %d MiB\n", fillMB, rate, wssMB)
	go dirty(buffer[:wssMB<<20], rate)
	for {
		answer(booted)
		time.Sleep(time.Second)
	}
}
"""
