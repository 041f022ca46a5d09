package ring

import "sync"

// probedSetupFlags lists the setup flags SupportedSetupFlags tries, each
// with the flags it depends on.
var probedSetupFlags = []struct{ flag, deps uint32 }{
	{SetupClamp, 0},
	{SetupSubmitAll, 0},
	{SetupCoopTaskrun, 0},
	{SetupTaskrunFlag, SetupCoopTaskrun},
	{SetupSingleIssuer, 0},
	{SetupDeferTaskrun, SetupSingleIssuer},
	{SetupNoSQArray, 0},
	{SetupRDisabled, 0},
}

var setupFlagsOnce struct {
	sync.Once
	flags uint32
}

// SupportedSetupFlags returns which of the setup flags SetupClamp,
// SetupSubmitAll, SetupCoopTaskrun, SetupTaskrunFlag, SetupSingleIssuer,
// SetupDeferTaskrun, SetupNoSQArray and SetupRDisabled the kernel accepts.
// There is no kernel query for setup flags, so each is found by creating
// (and at once closing, without mapping it) a two-entry ring with that
// flag; the answer is cached per process. Safe for concurrent use.
func SupportedSetupFlags() uint32 {
	setupFlagsOnce.Do(func() {
		for _, f := range probedSetupFlags {
			p := Params{Flags: f.flag | f.deps}
			fd, err := sysSetupFn(2, &p)
			if err != nil {
				continue
			}
			closeFd(fd)
			setupFlagsOnce.flags |= f.flag
		}
	})
	return setupFlagsOnce.flags
}

// SetupFlagSupported reports whether the kernel accepts every bit of flags
// among those SupportedSetupFlags probes. Safe for concurrent use.
func SetupFlagSupported(flags uint32) bool {
	return flags != 0 && SupportedSetupFlags()&flags == flags
}
