package conn

import "testing"

// TestInboundDefaults checks each kind's inbound bound when WithInboundLimit
// is not given, and that an explicit limit reaches every kind.
func TestInboundDefaults(t *testing.T) {
	limits := func(opts ...Option) (callback, netConn, underNetConn, packet int) {
		t.Helper()
		c, err := newConfig(opts)
		if err != nil {
			t.Fatal(err)
		}
		nc, err := newConfig(append(opts, asNetConn))
		if err != nil {
			t.Fatal(err)
		}
		return c.inboundLimit, (&NetConn{c: &Conn{cfg: nc}}).limit(), nc.inboundLimit, netLimit(c.netInbound)
	}
	cb, n, under, p := limits()
	if cb != DefaultInboundLimit || n != DefaultNetInbound || under != netInflightLimit || p != DefaultNetPacketInbound {
		t.Errorf("defaults: callback %d, NetConn %d (its connection %d), NetPacketConn %d; want %d, %d (%d), %d",
			cb, n, under, p, DefaultInboundLimit, DefaultNetInbound, netInflightLimit, DefaultNetPacketInbound)
	}
	cb, n, under, p = limits(WithInboundLimit(256 << 10))
	if cb != 256<<10 || n != 256<<10 || under != netInflightLimit || p != 256<<10 {
		t.Errorf("WithInboundLimit(256 KiB): callback %d, NetConn %d (its connection %d), NetPacketConn %d", cb, n, under, p)
	}
}
