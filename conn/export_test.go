package conn

// Test seams.

// SetForceSingleRecv makes new receives use the single-shot fallback.
func SetForceSingleRecv(on bool) { forceSingleRecv.Store(on) }

// SetForceSingleAccept makes new accepts single shots.
func SetForceSingleAccept(on bool) { forceSingleAccept.Store(on) }

// AcceptOutOfResources returns how many accepts of s failed with EMFILE,
// ENFILE, ENOBUFS or ENOMEM (each one starts a backoff).
func AcceptOutOfResources(s *Server) int64 { return s.outOfRes.Load() }

// StarvedTotal returns how many receives have waited in a starved queue
// (ENOBUFS) since the process started.
func StarvedTotal() int64 { return starvedTotal.Load() }
