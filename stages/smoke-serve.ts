import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('smoke-serve', 'Start serve.sh offline and check the start-up and load gates', 'issue 5');
