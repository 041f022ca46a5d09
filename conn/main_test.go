package conn_test

import (
	"os"
	"testing"

	"github.com/ringloop/ringloop/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }
