package loop

import (
	"log/slog"
	"strings"
	"sync"

	"github.com/ringloop/ringloop/ring"
)

// envName is the one environment variable the library reads, GODEBUG
// style: comma-separated key=value settings that change the defaults of
// every group the process makes (docs/configuration.md):
//
//		RINGLOOP=thread=shared,kernel=6.1
//
//	  - thread=locked|shared: the default of WithSharedThread.
//	  - kernel=<release>: the kernel profile ("6.1", or a uname release such
//	    as "6.1.0-18-amd64"): io_uring probes are capped to what that release
//	    offers; below 6.1 BackendUring fails and BackendAuto uses epoll.
//
// An option always wins over the environment. Unknown keys and bad values
// are ignored, and each distinct problem is reported once per process, at
// Warn, through the logger of the first group that meets it.
const envName = "RINGLOOP"

// envSettings is what RINGLOOP says.
type envSettings struct {
	shared   bool     // thread=shared
	kernel   string   // kernel=, checked by ring.ParseKernel
	problems []string // one line per key that was not understood
}

// parseEnv parses the value of RINGLOOP. Spaces around keys and values
// and empty items are allowed; a later item wins over an earlier one.
func parseEnv(v string) envSettings {
	var s envSettings
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch {
		case !ok:
			s.problem(item, "expected key=value")
		case key == "thread":
			switch val {
			case "locked":
				s.shared = false
			case "shared":
				s.shared = true
			default:
				s.problem(item, "expected thread=locked or thread=shared")
			}
		case key == "kernel":
			if _, err := ring.ParseKernel(val); err != nil {
				s.problem(item, err.Error())
				break
			}
			s.kernel = val
		default:
			s.problem(item, "unknown key (expected thread or kernel)")
		}
	}
	return s
}

func (s *envSettings) problem(item, why string) {
	s.problems = append(s.problems, envName+": ignoring "+item+": "+why)
}

// envReported holds the problems already reported, so each is logged once
// per process however many groups meet it.
var envReported sync.Map // string → struct{}

// reportEnv logs each problem not reported before.
func reportEnv(log *slog.Logger, problems []string) {
	for _, p := range problems {
		if _, seen := envReported.LoadOrStore(p, struct{}{}); !seen {
			log.Warn("loop: " + p)
		}
	}
}
