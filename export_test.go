package geminiguard

// Tests against a real store, which run in real time, may shorten how long
// a Client carries on alone after the store failed (StoreOpenFor), and
// lengthen the store's timeout where a loaded -race run is slower than a
// production Redis (SharedTimeout).
var (
	StoreOpenFor  = &storeOpenFor
	SharedTimeout = &sharedTimeout
)

// ProjectOf returns the id under which c shares its project's state, for
// tests that publish to the store beside the Clients.
func ProjectOf(c *Client) string { return c.fleet.project }
