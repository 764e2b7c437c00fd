/**
 * `tsx lib/pack/cli.ts <interchange-dir> <out-dir> [--shard-bytes N] [--tie | --no-tie]`: the pack step on
 * its own (used by the cross-language round-trip test). Prints the summary as JSON on stdout; on a refusal
 * prints the failure as JSON on stderr and exits 1.
 */
import { formatStageFailure } from '../failures.ts';
import { packInterchange, type PackOptions } from './pack-interchange.ts';

export async function main(argv: string[]): Promise<number> {
  const positional: string[] = [];
  const options: PackOptions = { log: (line) => process.stderr.write(`${line}\n`) };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--shard-bytes') options.shardBytes = Number(argv[++i]);
    else if (a === '--tie') options.tieWordEmbeddings = true;
    else if (a === '--no-tie') options.tieWordEmbeddings = false;
    else positional.push(a);
  }
  if (positional.length !== 2) {
    process.stderr.write('usage: tsx lib/pack/cli.ts <interchange-dir> <out-dir> [--shard-bytes N] [--tie | --no-tie]\n');
    return 2;
  }
  const result = await packInterchange(positional[0]!, positional[1]!, options);
  if (!result.ok) {
    process.stderr.write(`${formatStageFailure(result.error)}\n${JSON.stringify(result.error)}\n`);
    return 1;
  }
  process.stdout.write(`${JSON.stringify(result.value)}\n`);
  return 0;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  process.exitCode = await main(process.argv.slice(2));
}
