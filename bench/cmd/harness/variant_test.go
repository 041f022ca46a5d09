package main

import (
	"reflect"
	"testing"
)

func TestParseVariant(t *testing.T) {
	v, err := parseVariant("before=ringloop-uring:bin=/tmp/old/ringecho")
	if err != nil {
		t.Fatal(err)
	}
	if v.name != "before" || v.base != "ringloop-uring" || v.bin != "/tmp/old/ringecho" || len(v.env) != 0 {
		t.Fatalf("got %+v", v)
	}
	v, err = parseVariant("shared=ringloop-uring:RINGLOOP=thread=shared")
	if err != nil || !reflect.DeepEqual(v.env, []string{"RINGLOOP=thread=shared"}) || v.bin != "" {
		t.Fatalf("got %+v, %v", v, err)
	}
	for _, bad := range []string{"x", "=ringloop-uring:A=1", "x=ringloop-uring", "x=ringloop-uring:noequals"} {
		if _, err := parseVariant(bad); err == nil {
			t.Errorf("parseVariant(%q) accepted", bad)
		}
	}

	servers := map[string]server{"ringloop-uring": {Name: "ringloop-uring", Argv: []string{"/bin/ringecho", "-backend", "uring"}}}
	saved := append([]string(nil), serverOrder...)
	defer func() { serverOrder = saved }()
	addVariants(servers, []variant{{name: "before", base: "ringloop-uring", bin: "/tmp/old/ringecho"}})
	got := servers["before"]
	if !reflect.DeepEqual(got.Argv, []string{"/tmp/old/ringecho", "-backend", "uring"}) {
		t.Fatalf("variant argv %q", got.Argv)
	}
	if servers["ringloop-uring"].Argv[0] != "/bin/ringecho" {
		t.Fatalf("base server changed: %q", servers["ringloop-uring"].Argv)
	}
}
