package status

// KeysShown is how many of the busiest keys status shows.
const KeysShown = 10
