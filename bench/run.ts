// `npm run bench`: every benchmark in turn. Results are printed, never asserted on.
import { runAgentIdleBench } from './agent-idle.ts';
import { runAuthVerifyBench } from './auth-verify.ts';
import { runClusterCreateBench } from './cluster-create.ts';
import { runEndpointOverheadBench } from './endpoint-overhead.ts';
import { runFleetSimBench } from './fleet-sim.ts';
import { runIdleBench } from './idle.ts';
import { runProxyBench } from './proxy.ts';
import { runSshScpBench } from './ssh-scp.ts';

await runIdleBench();
await runAuthVerifyBench();
await runClusterCreateBench();
await runFleetSimBench();
await runAgentIdleBench();
await runProxyBench();
await runSshScpBench();
await runEndpointOverheadBench();
