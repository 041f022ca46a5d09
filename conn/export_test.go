package conn

// Test seams.

// SetForceSingleRecv makes new receives use the single-shot fallback.
func SetForceSingleRecv(on bool) { forceSingleRecv.Store(on) }

// SetForceSingleAccept makes new accepts single shots.
func SetForceSingleAccept(on bool) { forceSingleAccept.Store(on) }
