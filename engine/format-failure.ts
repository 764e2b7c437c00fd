/**
 * The one place a Failure becomes text: an exhaustive switch over `reason`. Adding a variant to the
 * Failure union without a case here fails the type check.
 */
import type { Failure } from './failure.ts';
import { unreachable } from './result.ts';

export function formatFailure(f: Failure): string {
  switch (f.reason) {
    case 'unknown-stage':
      return `unknown stage "${f.stage}" (known: ${f.known.join(', ')})`;
    case 'unknown-profile':
      return `unknown profile "${f.profile}" (known: ${f.known.length > 0 ? f.known.join(', ') : 'none: profiles/ is empty'})`;
    case 'invalid-override':
      return f.offSchema === true ? `--set ${f.text}: ${f.detail}` : `--set ${f.text}: ${f.detail} (expected --set <stage>.<key>[.<key>...]=<value>, the value as JSON or else a string)`;
    case 'invalid-environment':
      return `${f.variable}: ${f.detail}`;
    case 'cycle':
      return `the pipeline has a cycle: ${f.path.join(' -> ')}`;
    case 'missing-input':
      return `stage ${f.stage}: declared input ${f.path} does not exist`;
    case 'missing-code':
      return `stage ${f.stage}: declared code ${f.path} does not exist`;
    case 'invalid-json':
      return `${f.path} is invalid:\n${f.errors.map((e) => `  ${e}`).join('\n')}`;
    case 'workspace-locked':
      return `the workspace is locked by pid ${f.ownerPid}${f.ownerHost !== undefined ? ` on host ${f.ownerHost}` : ''} (${f.ownerCommand}) since ${f.since}\n  lock file: ${f.lockPath}\n  wait for it with --wait, or stop that process${f.ownerHost !== undefined ? ' there (a lock of another host is never taken over from here: remove the file only if that run is gone)' : ''}`;
    case 'worker-failed': {
      const how = f.exitCode !== null ? `exited with code ${f.exitCode}` : f.signal !== null ? `was killed by ${f.signal}` : 'could not be started';
      return `stage ${f.stage}: worker ${how}\n  command: ${f.command}\n--- last lines of its stderr ---\n${f.stderrTail}${f.stderrTail.endsWith('\n') || f.stderrTail === '' ? '' : '\n'}--- end ---`;
    }
    case 'not-implemented':
      return `stage ${f.stage} is not implemented yet: ${f.detail}`;
    case 'stage-failed':
      return `stage ${f.stage} failed: ${f.message}`;
    case 'missing-marker':
      return `stage ${f.stage}: in-place stage did not write its marker file ${f.marker} in ${f.dir}`;
    case 'interrupted':
      return `interrupted during stage ${f.stage}; its previous outputs and lock entry are untouched`;
    case 'invalid-pipeline':
      return `invalid pipeline: ${f.detail}`;
    case 'unsupported-output':
      return `stage ${f.stage}: output ${f.path} is a ${f.kind}; outputs may hold only files and directories`;
    case 'unresolvable-pins':
      return `${f.sources.length} pinned source${f.sources.length === 1 ? '' : 's'} cannot be resolved, so ${f.lockPath} cannot be written (fix the refs in the profile, or run where the hub is reachable):\n${f.sources.map((s) => `  ${s.stage} ${s.name} (${s.repo}@${s.ref}): ${s.error}`).join('\n')}`;
    case 'unknown-error-thrown':
      return `stage ${f.stage} threw: ${f.message}${f.stack === undefined ? '' : `\n${f.stack}`}`;
    default:
      return unreachable(f);
  }
}
