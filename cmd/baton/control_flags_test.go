package main

import "flag"

// cancelRaces is how many jobs TestCancelRacesFinish races a cancel
// against: 200 in make test, 1,000 in make chaos-cancel.
var cancelRaces = flag.Int("cancel.races", 200, "jobs TestCancelRacesFinish cancels at random moments")
