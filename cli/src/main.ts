import { runCli } from './cli.ts';

// The entry of the bundle (dist/anvil.mjs). Exits once stdout has flushed: idle keep-alive connections
// of fetch must not hold the process open after the command is done.
const code = await runCli(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
});
process.stdout.write('', () => process.exit(code));
