package geminiguard

// ProjectOf returns the id under which c shares its project's state, for
// tests that publish to the store beside the Clients.
func ProjectOf(c *Client) string { return c.fleet.project }
