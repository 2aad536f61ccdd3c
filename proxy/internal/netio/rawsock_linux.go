//go:build linux && !failover_portable

package netio

import (
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// The socket layer's fast path, on Linux: reads, writes and waits with raw system calls on the
// socket under a net.Conn (rawSocket), a send that waits for the reply in the same call, a
// wait that holds no read buffer, and peeks that see a peer leave without reading (hasInput,
// peerClosed). rawsock_portable.go is the slow path it shortcuts, with the standard library
// alone: what other systems build, and what Linux builds with the tag failover_portable, so
// that the tests run it where CI runs (docs/development.md, Running the tests). The two decide
// alike (peek_test.go, wait_test.go hold them to it); only the cost differs. client_linux.go
// and client_portable.go are the client connection's pair.

// Portable reports whether this build's socket layer is the portable one (rawsock_portable.go).
const Portable = false

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
	nowait  bool // writeThenPark: a full send buffer ends the write instead of waiting

	// parkUntilReadable's callback, and whether it has looked at the socket in this call.
	inputFn func(fd uintptr) bool
	looked  bool

	// writeThenPark's callback, and what it reports.
	parkFn  func(fd uintptr) bool
	waiting bool      // p was written whole: the callback waits for something to read
	woke    bool      // the wait ended with something to read (not a deadline or a close)
	sent    time.Time // when p was written whole (awaitAnswer)

	// What writeThenPark waits for once the socket took all of p, and what that wait needs.
	mode sendMode
	// idle and closing are a client socket's (awaitRequest): idle is set once the answer is
	// out, and no wait begins once closing (the server's shutdown) is set.
	idle, closing *atomic.Bool
}

// sendMode is what a rawSocket's writeThenPark waits for, once the socket took all of p.
type sendMode uint8

const (
	// awaitAnswer: an upstream socket waits for the answer to the request it sent, and keeps
	// when the request was written (sent).
	awaitAnswer sendMode = iota
	// awaitRequest: a client socket waits, after the end of an answer, for the client's next
	// request; the connection counts as idle while it waits (ClientConn.endAnswer).
	awaitRequest
)

// init readies an upstream socket (awaitAnswer).
func (s *rawSocket) init(raw syscall.RawConn) {
	s.raw, s.mode = raw, awaitAnswer
	s.readFn = s.readOnce
	s.writeFn = s.writeAll
	s.parkFn = s.writeThenParkStep
	s.inputFn = s.lookOnce
}

// initClient readies a client socket (awaitRequest): idle is the connection's flag, closing
// the server's shutdown flag.
func (s *rawSocket) initClient(raw syscall.RawConn, idle, closing *atomic.Bool) {
	s.init(raw)
	s.mode, s.idle, s.closing = awaitRequest, idle, closing
}

// parkUntilReadable waits, without a buffer to read into, until the socket has something to
// read (data, its end or an error) or the read deadline passes, as a RawConn read with
// hasInput does, but looks at the socket once only: a peek before the wait (the poller forgot
// what it saw before the call), and none after it, where the poller's word is taken. A
// committed stream waits so for each event of a token-by-token answer; a second peek would be
// a system call per event that the read after the wait repeats. A wake with nothing to read
// costs that read an EAGAIN, and it waits again.
func (s *rawSocket) parkUntilReadable() error {
	s.looked = false
	return s.raw.Read(s.inputFn)
}

// lookOnce is parkUntilReadable's RawConn.Read callback: hasInput the first time, true after a
// wait.
func (s *rawSocket) lookOnce(fd uintptr) bool {
	if s.looked {
		return true
	}
	s.looked = true
	return hasInput(fd)
}

// writeThenPark writes p, and when the socket takes all of it at once, parks in the same call
// on the poller until there is something to read (mode says what is awaited), or until the
// read deadline set on the connection. Waiting for a reply the usual way costs a read that
// finds nothing first: the poller forgets, at the start of every read, what it saw before it,
// so a read must look before it may wait, and right after a request is sent the answer is
// never there yet (a system call for nothing: BENCHMARKS.md, The tail and the stream path, the
// read that finds nothing). Here the poller is reset before p goes out, so nothing the reply
// does can be missed, and the first read after the wait finds it.
//
// n is how much of p the socket took; the rest, when it took less (a full send buffer: a
// large prompt, a target that does not read), is the caller's to write, waiting for room as
// it does. When it took all of p, sent is when (awaitAnswer). However the wait ended (something
// to read, the read deadline, a closed connection), the caller's own wait and read find it;
// woke tells whether it was something to read. A RawConn that refuses the call (closed, or its
// read deadline already past) writes nothing: the caller writes all of p.
func (s *rawSocket) writeThenPark(p []byte) (n int, sent time.Time, err error) {
	s.wbuf, s.wn, s.werr, s.waiting, s.woke, s.sent = p, 0, nil, false, false, time.Time{}
	s.raw.Read(s.parkFn) // how the wait ended is for the caller's own wait and read to find
	n, sent, err = s.wn, s.sent, s.werr
	s.wbuf, s.werr = nil, nil
	return n, sent, err
}

// writeThenParkStep is writeThenPark's RawConn.Read callback. Called first, it writes without
// waiting for room: true (return) when the write fails or the socket takes less than all of
// it, false (park) when it took all of it. Called again, once the poller saw something to
// read: true.
func (s *rawSocket) writeThenParkStep(fd uintptr) bool {
	if s.waiting {
		s.woke = true // the poller saw something to read: RawConn.Read calls again only then
		return true
	}
	s.nowait = true
	s.writeAll(fd)
	s.nowait = false
	if s.werr != nil || s.wn < len(s.wbuf) {
		return true
	}
	s.waiting = true
	switch s.mode {
	case awaitRequest:
		s.idle.Store(true) // before closing is read: a shutdown either sees it or is seen (Conns.CloseIdle)
		return s.closing.Load()
	case awaitAnswer:
		s.sent = time.Now()
	}
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
// idle upstream connection with anything waiting is spent (Conn.spent).
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

// socket is what an upstream connection keeps of its TCP socket: the descriptor, for the idle
// peek (idleInput), and, on a plain TCP connection, the raw socket its reads, writes and waits
// go through. Valid while the connection is open.
type socket struct {
	fd    int  // -1: none to peek
	plain bool // no TLS over the socket: raw is in use
	raw   rawSocket
}

// attach gives c its TCP socket tcp (under TLS when plain is false).
func (c *Conn) attach(tcp *net.TCPConn, plain bool) {
	c.fd = socketOf(tcp)
	if !plain {
		return
	}
	if raw, err := tcp.SyscallConn(); err == nil {
		c.raw.init(raw)
		c.plain = true
	}
}

// idleInput reports whether an idle connection's socket has anything to read (bytes, the end
// or an error): one non-blocking peek, which reads nothing.
func (c *Conn) idleInput() bool { return c.fd >= 0 && hasInput(uintptr(c.fd)) }

// readSocket reads into p once: through the raw socket, or the TLS connection.
func (c *Conn) readSocket(p []byte) (int, error) {
	if c.plain {
		return c.raw.read(p)
	}
	return c.conn.Read(p)
}

// writeSocket writes all of p on a plain TCP connection, waiting for room.
func (c *Conn) writeSocket(p []byte) (int, error) { return c.raw.write(p) }

// sendThenWait writes what of p a plain TCP connection's socket takes at once and, when it
// took all of p, waits in the same call for the answer (rawSocket.writeThenPark).
func (c *Conn) sendThenWait(p []byte) (n int, sent time.Time, err error) {
	return c.raw.writeThenPark(p)
}

// waitWithoutBuffer is Wait's way on a plain TCP connection after ExpectLongWaits: the empty
// read buffer goes back, and the wait holds none (parkUntilReadable, in slices). waited is
// false when the connection does not wait so: Wait then reads into the buffer.
func (c *Conn) waitWithoutBuffer() (waited bool, err error) {
	if !c.plain || !c.longWaits {
		return false, nil
	}
	c.releaseReader()
	return true, c.rd.untilReadable()
}

// untilReadable blocks, in the same slices as Read and with the same endings, until the
// socket has something to read (or an error to report), without a buffer to read into: the
// reads that follow find the data.
func (r *pollReader) untilReadable() error {
	now := time.Now()
	for {
		if err := r.slice(now); err != nil {
			return err
		}
		err := r.c.raw.parkUntilReadable()
		if err == nil || !IsTimeout(err) {
			return nil
		}
		now = time.Now()
		if err := r.expired(now); err != nil {
			return err
		}
		if err := r.yielded(now); err != nil {
			return err
		}
	}
}

// Peer is a client's connection as a request looks at it to see the client leave: its socket's
// descriptor, which Closed peeks. The zero Peer is one not looked up yet (Known).
type Peer struct {
	fd    int // -1: none to peek
	known bool
}

// PeerOf looks up the socket of the client connection c (a ClientConn, or any net.Conn with a
// socket under it).
func PeerOf(c net.Conn) Peer { return Peer{fd: socketOf(c), known: true} }

// Known reports whether the Peer was looked up (PeerOf).
func (p Peer) Known() bool { return p.known }

// Closed reports whether the client closed or reset its connection, without waiting and
// without reading: one non-blocking peek (peerClosed). A connection with bytes waiting (a
// request sent before its answer) is not closed. Always false for a connection without a
// socket to look at.
func (p Peer) Closed() bool { return p.known && peerClosed(p.fd) }
