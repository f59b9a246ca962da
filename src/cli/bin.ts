#!/usr/bin/env node
import { main } from './main.js';

main(process.argv).then((code) => {
  // Writes to a pipe complete asynchronously: exiting at once would cut `stackctl plan | less` at the
  // first 64 KiB. Exit once stdout and stderr have taken everything written before (their callbacks
  // run in order), whatever else (a pooled connection, a timer) is still open.
  let pending = 2;
  const exit = (): void => {
    if (--pending === 0) process.exit(code);
  };
  process.stdout.write('', exit);
  process.stderr.write('', exit);
});
