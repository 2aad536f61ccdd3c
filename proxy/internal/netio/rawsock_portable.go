//go:build !linux || failover_portable

package netio

import (
	"net"
	"time"
)

// The socket layer's slow path: the jobs of rawsock_linux.go, done with the standard library
// alone, through net.Conn reads and writes and read deadlines. It is what macOS and Windows
// build, and what Linux builds with the tag failover_portable (`go test -tags
// failover_portable ./proxy/...`, as CI does: docs/development.md, Running the tests), so
// that this path is tested where CI runs.
//
// It makes the same decisions, at a little more cost: a look at a socket that must not wait
// (did the client leave? has an idle upstream connection anything to read?) is a read with a
// deadline peekWait away, and what it finds is kept for the next read; a wait for an
// upstream's next bytes reads them into the connection's buffer (Conn.Wait); every request is
// written under a watch, as one that fills the send buffer is on Linux, and its answer's wait
// begins after the write (Conn.Send); an answer does not wait for the client's next request
// in its last write (client_portable.go).

// Portable reports whether this build's socket layer is the portable one (this file).
const Portable = true

// peekWait is how long a look that must not wait may take: its read is tried at once, and
// the deadline ends the wait for one that finds nothing. Far in the future against the few
// instructions between setting it and the read, so that the read is tried before it passes.
const peekWait = 50 * time.Microsecond

// socket is what an upstream connection keeps of its TCP connection: the connection itself,
// for the idle peek (idleInput), also under TLS.
type socket struct {
	tcp   *net.TCPConn
	plain bool // no TLS over it: Send writes it watched
}

// attach gives c its TCP connection tcp (under TLS when plain is false).
func (c *Conn) attach(tcp *net.TCPConn, plain bool) { c.tcp, c.plain = tcp, plain }

// idleInput reports whether an idle connection's socket has anything to read (bytes, the end
// or an error): a one-byte read of the TCP connection (under TLS too, as the Linux peek looks
// under it) that waits peekWait at most. A byte it reads is lost, but one that finds any makes
// the connection spent, and it is closed. The read deadline it leaves is replaced by the next
// read's (pollReader.slice sets one when none is known).
func (c *Conn) idleInput() bool {
	var b [1]byte
	c.tcp.SetReadDeadline(time.Now().Add(peekWait))
	n, err := c.tcp.Read(b[:])
	c.rd.set = time.Time{}
	return n > 0 || !IsTimeout(err)
}

// readSocket reads into p once.
func (c *Conn) readSocket(p []byte) (int, error) { return c.conn.Read(p) }

// writeSocket writes all of p on a plain TCP connection, waiting for room.
func (c *Conn) writeSocket(p []byte) (int, error) { return c.tcp.Write(p) }

// sendThenWait writes nothing: there is no write that does not wait here, so Send writes all
// of p, watched, and the answer's wait is Wait's.
func (c *Conn) sendThenWait(p []byte) (n int, sent time.Time, err error) { return 0, time.Time{}, nil }

// waitWithoutBuffer does not wait: a wait reads into the connection's buffer here, as one on
// a TLS connection does. Without a buffer it would have to read a byte, and the read that
// follows would return that byte alone; the wait comes again before every read, so a
// committed stream would be read a byte per read, and a piped body sent a byte per write.
func (c *Conn) waitWithoutBuffer() (waited bool, err error) { return false, nil }

// Peer is a client's connection as a request looks at it to see the client leave
// (ClientConn.peerClosed). The zero Peer is one not looked up yet (Known).
type Peer struct {
	c     *ClientConn // nil: not a ClientConn, nothing to look at
	known bool
}

// PeerOf looks up the client connection c.
func PeerOf(c net.Conn) Peer {
	cc, _ := c.(*ClientConn)
	return Peer{c: cc, known: true}
}

// Known reports whether the Peer was looked up (PeerOf).
func (p Peer) Known() bool { return p.known }

// Closed reports whether the client closed or reset its connection, without waiting
// (ClientConn.peerClosed). A connection with bytes waiting (a request sent before its answer)
// is not closed. Always false for a connection that is no ClientConn.
func (p Peer) Closed() bool { return p.c != nil && p.c.peerClosed() }
