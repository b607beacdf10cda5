package audit

import "testing"

// A failure outweighs what could not be checked, which outweighs a pass;
// each reason and note is kept once, and only the first failure.
func TestFindingsVerdict(t *testing.T) {
	var f Findings
	if f.Verdict() != VerdictVerified || f.Why() != "" {
		t.Fatal("empty findings do not verify")
	}
	f.Note("n")
	f.Note("n")
	f.Cannot("no key %d", 1)
	f.Cannot("no key %d", 1)
	if f.Verdict() != VerdictUnverifiable || len(f.Notes) != 1 || f.Why() != "no key 1" {
		t.Fatalf("%+v", f)
	}
	f.Fail("first")
	f.Fail("second")
	if f.Verdict() != VerdictFailed || f.Why() != "first" {
		t.Fatalf("%+v", f)
	}
}
