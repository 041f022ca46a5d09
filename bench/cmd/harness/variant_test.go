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
	v, err = parseVariant("locked=http-ringloop-uring:arg=-thread=locked:RINGLOOP=kernel=6.1")
	if err != nil || !reflect.DeepEqual(v.args, []string{"-thread=locked"}) || !reflect.DeepEqual(v.env, []string{"RINGLOOP=kernel=6.1"}) {
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
	addVariants(servers, []variant{{name: "locked", base: "ringloop-uring", args: []string{"-thread=locked"}}})
	if got := servers["locked"].Argv; !reflect.DeepEqual(got, []string{"/bin/ringecho", "-backend", "uring", "-thread=locked"}) {
		t.Fatalf("variant argv %q", got)
	}
	if !reflect.DeepEqual(servers["ringloop-uring"].Argv, []string{"/bin/ringecho", "-backend", "uring"}) {
		t.Fatalf("base server changed: %q", servers["ringloop-uring"].Argv)
	}
}
