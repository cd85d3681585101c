timeout: failed to run command ‘./studioctl’: No such file or directory
