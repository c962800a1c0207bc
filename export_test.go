package geminiguard

// StoreOpenFor lets tests against a real store, which run in real time,
// shorten how long a Client carries on alone after the store failed.
var StoreOpenFor = &storeOpenFor
