package coordha

// ListenWait lets the tests shorten listenWait.
var ListenWait = &listenWait
