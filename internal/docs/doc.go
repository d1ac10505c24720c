// Package docs checks the README and the guide under docs/ against the
// repository, so that they cannot drift from it:
//
//   - every relative link and image resolves, and every #anchor names a
//     heading of its page (GitHub's slugs);
//   - every Go sample is marked with the file it comes from
//     (<!-- sample: PATH -->) and is found there, line for line, in a file
//     that compiles under make test (an Example, a program under test, or
//     samples_test.go here);
//   - every sample of output is marked with the test that prints and
//     compares it (<!-- output: TestName -->), and that test names the page;
//     a drawing in text is marked <!-- illustration -->;
//   - every make target a page runs exists;
//   - docs/handlers.md's pgsink speed table is the run that
//     BenchmarkSinkFigures recorded (docs/figures/sinkfigures.txt, at a
//     commit), figure for figure;
//   - every exported name of every package has a doc comment.
//
// It has no code of its own: its tests are the checks.
package docs
