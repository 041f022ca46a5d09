// Package hostile holds ringloop's hostile-peer suite: each test plays a
// remote peer that tries to make a server with default options hold memory
// or fds in proportion to what the peer sends or refuses to read, and
// asserts the bound docs/security.md promises, on both backends.
//
// Every attack is bounded in count and time; under -short it scales down
// (CI also runs it in full). The peer runs in the same process over
// loopback, so the process's resident set is the server's plus a small,
// fixed client cost.
package hostile
