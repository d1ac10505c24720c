// Package spintest checks a Promela model with spin, for the tests of
// nandi's protocol models (partition/model, checkpoint/model).
//
// Check copies the model into the test's temporary directory, has spin
// generate its verifier (spin -a, with the run's defines), compiles it
// with gcc and runs it, then parses what it reports: errors, states
// stored, the depth reached, the assertion violated and its depth. A test
// then asserts the result: the real model with no errors and a complete
// search, each seeded bug with its violation.
//
// spin and gcc are found on PATH. When either is missing, Check fails the
// test and says how to install it (apt-get install -y spin gcc, as .ci/run
// does): a model that is not checked is never a silent pass.
package spintest
