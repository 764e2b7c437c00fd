import { placeholderStage } from './placeholder.ts';

export const stage = placeholderStage('vendor-wheels', 'Resolve and download the serving wheels for the target platform', 'issue 5');
