//go:build !linux || failover_portable

package proxy

import (
	"net"
	"time"
)

// The socket layer on the portable path: the jobs of rawsock.go (Linux), done with the
// standard library alone, through net.Conn reads and writes and read deadlines. It is what
// macOS and Windows build, and what Linux builds with the tag failover_portable
// (`go test -tags failover_portable ./proxy/...`, as CI does: README, Development), so that
// this path is tested where CI runs.
//
// It makes the same decisions, at a little more cost: a look at a socket that must not wait
// (did the client leave? has an idle upstream connection anything to read?) is a read with a
// deadline peekWait away, and what it finds is kept for the next read; a wait for an upstream's
// next bytes holds a read buffer (waitsUnbuffered); every upstream request is written under a watch
// (upConn.sendAwait), as a write that fills the send buffer is on Linux; an answer does not
// wait for the client's next request in its last write (clientconn_portable.go).

// peekWait is how long a look that must not wait may take: its read is tried at once, and
// the deadline ends the wait for one that finds nothing. Far in the future against the few
// instructions between setting it and the read, so that the read is tried before it passes.
const peekWait = 50 * time.Microsecond

// waitsUnbuffered: a wait for an upstream's next bytes holds a read buffer, as one on a TLS
// connection does (exchange.waitIdle). Without one the wait must read a byte (awaitInput), and
// the read that follows returns that byte alone; the wait comes again before every read, so a
// committed stream would be read a byte per read, and a piped body sent a byte per write.
const waitsUnbuffered = false

// rawSocket reads and writes a TCP connection through the connection itself (its Linux
// counterpart uses raw system calls). Owned by the connection's one reader and writer.
type rawSocket struct {
	conn *net.TCPConn
	// What awaitInput found, for the read that follows: a byte (held), or an error.
	b    [1]byte
	held bool
	err  error
}

func (s *rawSocket) init(conn *net.TCPConn) { s.conn = conn }

// awaitInput waits until the socket has something to read (data, its end or an error) or the
// read deadline passes, which it returns: it reads one byte, which the next read returns first,
// or keeps the error the read met for the next read to return. waitIdle does not wait so on this
// path (waitsUnbuffered).
func (s *rawSocket) awaitInput() error {
	if s.held || s.err != nil {
		return nil
	}
	n, err := s.conn.Read(s.b[:])
	switch {
	case n > 0:
		s.held = true
	case err != nil && isTimeout(err):
		return err
	case err != nil:
		s.err = err
	}
	return nil
}

// sendAwait writes nothing: there is no write that does not wait here, so the caller writes
// all of p, waiting for room, watched (upConn.sendAwait).
func (s *rawSocket) sendAwait(p []byte, anchor time.Time) (n int, sent time.Time, err error) {
	return 0, time.Time{}, nil
}

// read reads into p once: what awaitInput found first, else from the connection, which
// returns io.EOF at the peer's orderly close.
func (s *rawSocket) read(p []byte) (int, error) {
	switch {
	case len(p) == 0:
		return 0, nil
	case s.held:
		p[0], s.held = s.b[0], false
		return 1, nil
	case s.err != nil:
		err := s.err
		s.err = nil
		return 0, err
	}
	return s.conn.Read(p)
}

// write writes all of p, waiting while the send buffer is full.
func (s *rawSocket) write(p []byte) (int, error) { return s.conn.Write(p) }

// upSocket is what an upstream connection keeps of its TCP connection, for the idle peek
// (idleInput): the connection itself, also under TLS.
type upSocket struct {
	tcp *net.TCPConn
}

// attach gives c its TCP connection tcp (under TLS when plain is false): for the idle peek
// and, on a plain TCP connection, for reads, writes and waits (rawSocket).
func (c *upConn) attach(tcp *net.TCPConn, plain bool) {
	c.tcp = tcp
	if plain {
		c.sock.init(tcp)
		c.rd.sock = &c.sock
	}
}

// idleInput reports whether an idle connection's socket has anything to read (bytes, the end
// or an error): a one-byte read of the TCP connection (under TLS too, as the Linux peek looks
// under it) that waits peekWait at most. A byte it reads is lost, but one that finds any makes
// the connection spent, and it is closed. The read deadline it leaves is replaced by the next
// read's (pollReader.slice sets one when none is known).
func (c *upConn) idleInput() bool {
	var b [1]byte
	c.tcp.SetReadDeadline(time.Now().Add(peekWait))
	n, err := c.tcp.Read(b[:])
	c.rd.set = time.Time{}
	return n > 0 || !isTimeout(err)
}

// clientPeer is the client's connection, which clientGone looks at (clientConn.peerClosed):
// nil when it is not a clientConn (there is then nothing to look at). The zero value,
// peerUnknown, is one not looked up yet.
type clientPeer struct {
	c     *clientConn
	known bool
}

var peerUnknown clientPeer

// peerOf looks up the client connection c.
func peerOf(c net.Conn) clientPeer {
	cc, _ := c.(*clientConn)
	return clientPeer{c: cc, known: true}
}

// closed reports whether the client closed or reset its connection.
func (p clientPeer) closed() bool { return p.c != nil && p.c.peerClosed() }
