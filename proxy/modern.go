package proxy

// MetaSubscription names the subscriptions/listen stream a notification
// belongs to (2026-07-28).
const MetaSubscription = "io.modelcontextprotocol/subscriptionId"
