package proxy

import (
	"io"
	"os"
	"syscall"
)

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
	nowait  bool // tryWrite: a full send buffer ends the write instead of waiting
}

func (s *rawSocket) init(raw syscall.RawConn) {
	s.raw = raw
	s.readFn = s.readOnce
	s.writeFn = s.writeAll
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

// tryWrite writes what of p the socket takes now, without waiting for room.
func (s *rawSocket) tryWrite(p []byte) (int, error) {
	s.nowait = true
	n, err := s.write(p)
	s.nowait = false
	return n, err
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
