mod recording;
