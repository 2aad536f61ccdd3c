//go:build linux && !failover_portable

package proxy

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The socket layer on Linux: reads, writes and waits with raw system calls on the socket
// under a net.Conn (rawSocket), and peeks that see a peer leave without reading (hasInput,
// peerClosed). rawsock_portable.go does the same jobs with the standard library alone, for
// other systems and for Linux built with the tag failover_portable; clientconn_raw.go and
// clientconn_portable.go are the client connection's half of the pair.

// rawSocket reads and writes a TCP socket through its syscall.RawConn with raw system calls.
//
// Go's own socket reads and writes enter the scheduler's "in a system call" state around each
// call. While a goroutine is in that state the runtime's monitor thread may take its P away
// and start another thread to run it (a handoff: a futex wake and two context switches); on a
// busy proxy a loopback write, which runs the receiver's TCP stack too, lasts long enough for
// that to happen often. The socket is non-blocking (the runtime's poller set it so), so these
// calls never wait in the kernel: they return data, an end, an error or EAGAIN, and on EAGAIN
// the RawConn parks the goroutine on the poller as a net.Conn would, deadlines included.
//
// The price: the goroutine keeps its P, and cannot be preempted, for the length of one call
// (microseconds: a copy into or out of the socket buffer).
//
// The callbacks are method values made once (a closure per call would allocate). Unlike a
// net.Conn, a rawSocket takes one reader and one writer at a time, not concurrent writers:
// each connection here is written by the one goroutine serving it.
type rawSocket struct {
	raw syscall.RawConn

	readFn  func(fd uintptr) bool
	rbuf    []byte
	rn      int
	rerr    syscall.Errno
	writeFn func(fd uintptr) bool
	wbuf    []byte
	wn      int
	werr    error
	nowait  bool // sendThenWait: a full send buffer ends the write instead of waiting

	// awaitInput's callback, and whether it has looked at the socket in this call.
	inputFn func(fd uintptr) bool
	looked  bool

	// sendAwait's callback, and what it reports.
	sendFn   func(fd uintptr) bool
	awaiting bool      // p was written whole: the callback waits for something to read
	woke     bool      // the wait ended with something to read (not a deadline or a close)
	anchor   time.Time // a reading sent is taken as anchor advanced by the monotonic clock
	sent     time.Time // when p was written whole

	// A client connection's socket (clientConn.writeAwait) waits after an answer for the
	// client's next request, not for an answer: idle is set once the answer is out, and stop
	// (the server's shutdown) ends the wait before it begins. nil on an upstream socket.
	idle, stop *atomic.Bool
}

func (s *rawSocket) init(raw syscall.RawConn) {
	s.raw = raw
	s.readFn = s.readOnce
	s.writeFn = s.writeAll
	s.sendFn = s.sendThenWait
	s.inputFn = s.lookOnce
}

// awaitInput waits, without a buffer to read into, until the socket has something to read (data,
// its end or an error) or the read deadline passes, as a RawConn read with hasInput does, but
// looks at the socket once only: a peek before the wait (the poller forgot what it saw before
// the call), and none after it, where the poller's word is taken. A committed stream waits so
// for each event of a token-by-token answer; the second peek was a system call per event that
// the read after the wait repeats. A wake with nothing to read costs that read an EAGAIN, and
// it waits again.
func (s *rawSocket) awaitInput() error {
	s.looked = false
	return s.raw.Read(s.inputFn)
}

// lookOnce is awaitInput's RawConn.Read callback: hasInput the first time, true after a wait.
func (s *rawSocket) lookOnce(fd uintptr) bool {
	if s.looked {
		return true
	}
	s.looked = true
	return hasInput(fd)
}

// sendAwait writes p, and when the socket takes all of it at once, waits in the same call for
// something to read on the socket (the answer's first bytes, its end or an error), until the
// read deadline set on the connection. Waiting for an answer the usual way costs a read that
// finds nothing first: the poller forgets, at the start of every read, what it saw before it,
// so a read must look before it may wait, and right after a request is sent the answer is
// never there yet (600 ns of system call on this VM, for nothing). Here the poller is reset
// before the request goes out, so nothing the answer does can be missed, and the first read
// after the wait finds it.
//
// n is how much of p the socket took; the rest, when it took less (a full send buffer: a
// large prompt, a target that does not read), is the caller's to write, waiting for room as
// it does. When it took all of p, sent is the reading of the clock just after (anchor, a
// reading with the monotonic clock, advanced by it). However the wait ended (something to
// read, the read deadline, a closed connection), the caller's own wait and read find it. A
// RawConn that refuses the call (closed, or its read deadline already past) writes nothing:
// the caller writes all of p.
//
// On a client connection's socket (idle set) sent is not taken: the wait is for the client's
// next request, idle is set as it begins, and none begins once stop is set.
func (s *rawSocket) sendAwait(p []byte, anchor time.Time) (n int, sent time.Time, err error) {
	s.wbuf, s.wn, s.werr, s.awaiting, s.woke, s.anchor, s.sent = p, 0, nil, false, false, anchor, time.Time{}
	s.raw.Read(s.sendFn) // how the wait ended is for the caller's own wait and read to find
	n, sent, err = s.wn, s.sent, s.werr
	s.wbuf, s.werr = nil, nil
	return n, sent, err
}

// sendThenWait is sendAwait's RawConn.Read callback. Called first, it writes without waiting
// for room: true (return) when the write fails or the socket takes less than all of it, false
// (wait) when it took all of it. Called again, once the poller saw something to read: true.
func (s *rawSocket) sendThenWait(fd uintptr) bool {
	if s.awaiting {
		s.woke = true // the poller saw something to read: RawConn.Read calls again only then
		return true
	}
	s.nowait = true
	s.writeAll(fd)
	s.nowait = false
	if s.werr != nil || s.wn < len(s.wbuf) {
		return true
	}
	s.awaiting = true
	if s.idle != nil {
		s.idle.Store(true) // before stop is read: a shutdown either sees it or is seen (clientConns.closeIdle)
		return s.stop.Load()
	}
	s.sent = s.anchor.Add(time.Since(s.anchor))
	return false
}

// read reads into p once, waiting on the poller while nothing has arrived. It returns io.EOF
// at the peer's orderly close; other errors are the RawConn's (a deadline, a closed
// connection) or an *os.SyscallError.
func (s *rawSocket) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rbuf, s.rn, s.rerr = p, 0, 0
	err := s.raw.Read(s.readFn)
	n, rerr := s.rn, s.rerr
	s.rbuf = nil
	switch {
	case err != nil:
		return 0, err
	case rerr != 0:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *rawSocket) readOnce(fd uintptr) bool {
	for {
		n, e := sysRead(fd, s.rbuf)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		case 0:
			s.rn = n
		default:
			s.rerr = e
		}
		return true
	}
}

// write writes all of p, waiting on the poller whenever the socket's send buffer is full.
func (s *rawSocket) write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.wbuf, s.wn, s.werr = p, 0, nil
	err := s.raw.Write(s.writeFn)
	n, werr := s.wn, s.werr
	s.wbuf, s.werr = nil, nil
	switch {
	case werr != nil:
		return n, werr
	case err != nil:
		return n, err
	}
	return n, nil
}

func (s *rawSocket) writeAll(fd uintptr) bool {
	for s.wn < len(s.wbuf) {
		n, e := sysWrite(fd, s.wbuf[s.wn:])
		switch {
		case e == 0 && n > 0:
			s.wn += n
		case e == 0: // nothing written and no error: as internal/poll, do not spin
			s.werr = io.ErrUnexpectedEOF
			return true
		case e == syscall.EINTR:
		case e == syscall.EAGAIN:
			return s.nowait
		default:
			s.werr = os.NewSyscallError("write", e)
			return true
		}
	}
	return true
}

// hasInput reports whether the socket has data, an end or an error to read (false when a read
// would block), without reading it: one non-blocking peek.
func hasInput(fd uintptr) bool {
	var buf [1]byte
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&buf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno != syscall.EAGAIN
}

// peerClosed reports whether the peer of a socket has closed or reset it, without blocking
// and without consuming data: a MSG_PEEK read that returns 0 bytes means an orderly close.
// The socket is already non-blocking (Go's poller), and MSG_DONTWAIT makes sure of it. It is
// for the client's connection, on which bytes waiting (a pipelined request) are no close; an
// idle upstream connection with anything waiting is spent (upConn.spent).
func peerClosed(fd int) bool {
	if fd < 0 {
		return false
	}
	var buf [1]byte
	n, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	switch {
	case errno == syscall.EAGAIN || errno == syscall.EINTR:
		return false
	case errno != 0:
		return true // reset or another socket error: the peer is gone
	}
	return n == 0
}

// socketOf returns the descriptor under a connection, or -1 when there is none to peek.
// The descriptor stays owned by the connection: it must not be used after the connection closes.
func socketOf(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	if raw.Control(func(s uintptr) { fd = int(s) }) != nil {
		return -1
	}
	return fd
}

// waitsUnbuffered: a wait for an upstream's next bytes holds no read buffer (rawSocket.awaitInput
// reads nothing).
const waitsUnbuffered = true

// upSocket is what an upstream connection keeps of its TCP socket: the descriptor, for the
// idle peek (idleInput). It is valid while the connection is open.
type upSocket struct {
	fd int // -1: none to peek
}

// attach gives c its TCP socket tcp (under TLS when plain is false): the descriptor for the
// idle peek and, on a plain TCP connection, reads, writes and waits through the raw socket.
func (c *upConn) attach(tcp *net.TCPConn, plain bool) {
	c.fd = socketOf(tcp)
	if !plain {
		return
	}
	if raw, err := tcp.SyscallConn(); err == nil {
		c.sock.init(raw)
		c.rd.sock = &c.sock
	}
}

// idleInput reports whether an idle connection's socket has anything to read (bytes, the end
// or an error): one non-blocking peek, which reads nothing.
func (c *upConn) idleInput() bool { return c.fd >= 0 && hasInput(uintptr(c.fd)) }

// clientPeer is the client's socket descriptor, which clientGone peeks (peerClosed): -1 when
// the connection has none, peerUnknown until it is looked up.
type clientPeer int

const peerUnknown clientPeer = -2

// peerOf looks up the socket of the client connection c.
func peerOf(c net.Conn) clientPeer { return clientPeer(socketOf(c)) }

// closed reports whether the client closed or reset its connection (peerClosed).
func (p clientPeer) closed() bool { return peerClosed(int(p)) }
