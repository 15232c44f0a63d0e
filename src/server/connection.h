// connection.h: whether the client of a request is still connected, asked from a request
// handler. cpp-httplib 0.11 answers that only inside a content provider (DataSink::is_writable),
// and once a provider runs the status line has been sent; a handler that waits for the whole
// answer, so that it can still send an error status, has no socket to ask. This finds the
// request's socket by its addresses and asks the kernel directly, as is_writable does.
#pragma once

#include <httplib.h>

namespace dsv4::server {

// The socket of the connection that carries `req`: the one whose local and peer addresses are
// the request's (cpp-httplib formats them the same way). -1 if none matches; peer_hung_up(-1)
// is false, so a hang-up would then go unnoticed until the answer is written.
int connection_socket(const httplib::Request& req);

// True once the peer has closed or reset the connection (what cpp-httplib calls a dead
// socket: readable with nothing to read). Pipelined bytes waiting to be read are not a hang-up.
bool peer_hung_up(int fd);

}  // namespace dsv4::server
