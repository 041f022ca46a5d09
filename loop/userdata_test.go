package loop

import "testing"

func TestUserDataRoundTrip(t *testing.T) {
	for _, tag := range []opTag{tagAccept, tagRecvBuf, tagNop, tagInternal} {
		for _, gen := range []uint32{1, 2, genMask - 1, genMask} {
			for _, slot := range []uint32{0, 1, 255, 1 << 20, slotMask} {
				ud := packUserData(tag, gen, slot)
				gt, gg, gs := unpackUserData(ud)
				if gt != tag || gg != gen || gs != slot {
					t.Fatalf("pack(%v,%d,%d)=%#x unpacks to (%v,%d,%d)", tag, gen, slot, ud, gt, gg, gs)
				}
				if ud == 0 {
					t.Fatalf("pack(%v,%d,%d) produced user_data 0", tag, gen, slot)
				}
			}
		}
	}
}

func TestNextGenSkipsZero(t *testing.T) {
	if g := nextGen(genMask); g != 1 {
		t.Fatalf("nextGen(max) = %d, want 1", g)
	}
	g := uint32(1)
	for i := 0; i < 3*(genMask+1); i += 4099 {
		for j := 0; j < 4099; j++ {
			g = nextGen(g)
			if g == 0 || g > genMask {
				t.Fatalf("nextGen produced %d", g)
			}
		}
	}
}

func TestInternalUserDataNonZero(t *testing.T) {
	for _, id := range []internalID{internalWake, internalCancel, internalProbe} {
		ud := internalUserData(id)
		tag, _, slot := unpackUserData(ud)
		if ud == 0 || tag != tagInternal || internalID(slot) != id {
			t.Fatalf("internal %d: ud=%#x tag=%v slot=%d", id, ud, tag, slot)
		}
	}
}

// FuzzUserData checks that packing and unpacking are inverse for every
// valid generation and slot, and that no packed value is 0.
func FuzzUserData(f *testing.F) {
	f.Add(uint8(1), uint32(1), uint32(0))
	f.Add(uint8(0xff), uint32(genMask), uint32(slotMask))
	f.Fuzz(func(t *testing.T, tag uint8, gen uint32, slot uint32) {
		gen = gen & genMask
		if gen == 0 {
			gen = 1
		}
		ud := packUserData(opTag(tag), gen, slot)
		gt, gg, gs := unpackUserData(ud)
		if gt != opTag(tag) || gg != gen || gs != slot || ud == 0 {
			t.Fatalf("pack(%d,%d,%d)=%#x unpacks to (%d,%d,%d)", tag, gen, slot, ud, gt, gg, gs)
		}
	})
}
