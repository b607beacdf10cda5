package e2e

// noUserNSEnv makes the test binary execWithoutUserNamespaces, on Linux.
const noUserNSEnv = "GUARD_E2E_NO_USERNS"
