import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('pack', 'Pack ternary codes into 2-bit shards and write the quantization manifest', 'issue 3');
