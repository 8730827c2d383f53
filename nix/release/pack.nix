# The release's one way of packing a directory, so that the same files give the same bytes: modes
# normalised (directories 755, files 644; the caller marks its executables afterwards) and GNU tar
# with sorted names, one mtime and owner 0.
{
  # Every timestamp of the release.
  sourceDateEpoch,
}:
{
  tarOptions = "--sort=name --mtime=@${toString sourceDateEpoch} --owner=0 --group=0 --numeric-owner --format=gnu";
  # Shell: the modes under DIR (a shell word) normalised.
  normaliseModes = dir: ''
    chmod -R u+w ${dir}
    find ${dir} -type d -exec chmod 755 {} +
    find ${dir} -type f -exec chmod 644 {} +
  '';
}
