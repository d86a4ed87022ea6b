package launch

// ProgressTTYEnv names, in each worker's environment, the terminal that the launcher's own
// standard output is, when it is one (cmd/gprun sets it). A launcher copies the workers'
// output line by line with a rank prefix, so a progress bar redrawn with carriage returns
// would reach the terminal only as its last state at each line's end; a worker that draws
// one (the trainer's rank 0) opens this terminal and draws it there, and writes whole lines
// to its own output as before. Unset when the launcher's output is a pipe or a file.
const ProgressTTYEnv = "GP_PROGRESS_TTY"
