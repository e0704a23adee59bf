// `npm run bench`: every benchmark in turn. Results are printed, never asserted on.
import { runAuthVerifyBench } from './auth-verify.ts';

await runAuthVerifyBench();
