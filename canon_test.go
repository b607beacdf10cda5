package guard

import "testing"

func TestPinIgnoresOrderAndUnpinnedMembers(t *testing.T) {
	a, err := PinOf([]byte(`{"name":"t","description":"d","inputSchema":{"type":"object","properties":{"b":{},"a":{}}},"_meta":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := PinOf([]byte(`{"inputSchema":{"properties":{"a":{},"b":{}},"type":"object"},"description":"d","name":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("pins differ for the same definition: %s vs %s", a, b)
	}
	c, _ := PinOf([]byte(`{"name":"t","description":"d!","inputSchema":{"type":"object"}}`))
	if c == a {
		t.Fatal("a changed description kept the pin")
	}
	d, _ := PinOf([]byte(`{"name":"t","title":null,"description":"d","inputSchema":{"type":"object","properties":{"b":{},"a":{}}}}`))
	if d == a {
		t.Fatal("an added null title kept the pin")
	}
}

func TestDigestRejectsDuplicateKeys(t *testing.T) {
	if _, err := Digest([]byte(`{"a":1,"a":2}`)); err == nil {
		t.Fatal("duplicate keys digested")
	}
	x, _ := Digest([]byte(`{"a":1.0,"b":"x"}`))
	y, _ := Digest([]byte(`{"b":"x","a":1}`))
	if x != y {
		t.Fatal("canonically equal arguments digest differently")
	}
}
